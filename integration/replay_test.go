//go:build integration

package integration

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// startReplayModel starts `dsh-sandbox replay-model` with args and returns
// its base URL; the process is stopped with SIGTERM at cleanup, and its
// exit status checked.
func startReplayModel(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"replay-model"}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	return serveReplayModel(t, cmd)
}

// serveReplayModel starts cmd, a replay-model command line (possibly
// wrapped, as in nsenter), and returns the base URL it prints; it is
// stopped with SIGTERM at cleanup, and its exit status checked.
func serveReplayModel(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("replay-model after SIGTERM: %v (stderr %s), want exit 0", err, stderr.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the base URL: %v (stderr %s)", err, stderr.String())
	}
	base := strings.TrimSpace(line)
	if !strings.HasPrefix(base, "http://127.0.0.1:") || !strings.HasSuffix(base, "/v1") {
		t.Fatalf("base URL %q, want http://127.0.0.1:PORT/v1", base)
	}
	return base
}

func TestReplayModelServesScriptAndRecords(t *testing.T) {
	record := filepath.Join(t.TempDir(), "requests.jsonl")
	base := startReplayModel(t, "--script", "testdata/replay-bash.json", "--record", record)

	body := `{"model":"deepseek-chat","messages":[{"role":"user","content":"show me"}],"tools":[{"type":"function","function":{"name":"bash"}}]}`
	resp, err := http.Post(base+"/chat/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Choices []struct {
			Message struct {
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct {
						Name, Arguments string
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
	}
	err = json.NewDecoder(resp.Body).Decode(&c)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first call: %d %v", resp.StatusCode, err)
	}
	if len(c.Choices) != 1 || len(c.Choices[0].Message.ToolCalls) != 1 || c.Choices[0].Message.ToolCalls[0].ID != "call_env" ||
		!strings.Contains(c.Choices[0].Message.ToolCalls[0].Function.Arguments, "grep ^DSH_") {
		t.Fatalf("first response = %+v, want the scripted bash call", c)
	}

	// The second response streams; the third request finds the script exhausted.
	resp, err = http.Post(base+"/chat/completions", "application/json",
		strings.NewReader(`{"stream":true,"messages":[{"role":"tool","tool_call_id":"call_env","content":"DSH_SHELL=1"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(data), "data: [DONE]") || !strings.Contains(string(data), `"content":"Done: the comman"`) {
		t.Fatalf("second response: %d %s, want a finished event stream with the scripted text", resp.StatusCode, data)
	}
	resp, err = http.Post(base+"/chat/completions", "application/json", strings.NewReader(`{"messages":[{"role":"user","content":"more"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	data, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), "replay_script_exhausted") {
		t.Fatalf("third response: %d %s, want 400 replay_script_exhausted", resp.StatusCode, data)
	}

	raw, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(raw)), "\n")
	if len(lines) != 3 {
		t.Fatalf("record has %d lines, want 3:\n%s", len(lines), raw)
	}
	var first struct {
		Seq  int `json:"seq"`
		Body struct {
			Tools []json.RawMessage `json:"tools"`
		} `json:"body"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil || first.Seq != 1 || len(first.Body.Tools) != 1 {
		t.Errorf("record line 1 = %s (%v), want seq 1 with the request's tools", lines[0], err)
	}
	if fi, err := os.Stat(record); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("record file mode = %v (%v), want 0600", fi.Mode().Perm(), err)
	}
}

func TestReplayModelRefusesBadFlags(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.json")
	if err := os.WriteFile(bad, []byte(`{"responses":[{"tool_calls":[{"arguments":{}}]}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--script", "testdata/replay-bash.json", "--listen", "0.0.0.0:0"}, "not a loopback address"},
		{[]string{"--script", bad}, "responses[0].tool_calls[0].name: required"},
		{[]string{"--script", filepath.Join(t.TempDir(), "missing.json")}, "--script"},
		{nil, "--script is required"},
	} {
		r := run(t, nil, append([]string{"replay-model"}, tc.args...)...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("replay-model %q: exit %d, stderr %q; want exit 2 naming %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	// The legitimate variant: a loopback address by name works.
	startReplayModel(t, "--script", "testdata/replay-bash.json", "--listen", "127.0.0.1:0")
}

// TestReplayModelHelpNamesEndpoints: --help says which endpoints it serves.
func TestReplayModelHelpNamesEndpoints(t *testing.T) {
	r := run(t, nil, "replay-model", "--help")
	for _, want := range []string{"/v1/chat/completions", "/v1/responses", "/v1/messages"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("replay-model --help: exit %d, output lacks %s:\n%s", r.code, want, r.stdout)
		}
	}
}
