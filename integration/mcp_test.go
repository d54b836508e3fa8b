//go:build integration

package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// startMCP runs `dsh-sandbox mcp` for session s1 of e as the Go SDK's
// client sees it: a subprocess speaking MCP on stdin/stdout. Its
// environment carries stale DSH_* values, which must never reach a call.
func startMCP(t *testing.T, e env, args ...string) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(binary, append(append([]string{"mcp"}, e.flags("s1")...), args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "DSH_STALE_SENTINEL=1", "DSH_SESSION_ID=wrong"}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "dsh-sandbox-integration", Version: "1"}, nil)
	cs, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connecting to dsh-sandbox mcp: %v\nstderr: %s", err, stderr.String())
	}
	t.Cleanup(func() {
		if err := cs.Close(); err != nil {
			t.Logf("closing the MCP session: %v", err)
		}
		if t.Failed() {
			t.Logf("dsh-sandbox mcp stderr:\n%s", stderr.String())
		}
	})
	return cs
}

// callTool calls a tool and returns the result and its text.
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s %v: protocol error %v, want a tool result", name, args, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return res, b.String()
}

func TestMCPToolsAndForegroundBash(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	cs := startMCP(t, e, "--policy", "workspace-write")

	tools, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	if want := []string{"bash", "job_kill", "job_output"}; !slices.Equal(names, want) {
		t.Fatalf("tools = %v, want %v", names, want)
	}

	res, text := callTool(t, cs, "bash", map[string]any{"command": "echo out; echo err >&2; exit 3"})
	if res.IsError || text != "out\n[stderr]\nerr\n[exit code: 3]" {
		t.Errorf("bash exit 3: IsError %v, text %q; want the rendered result", res.IsError, text)
	}
	var structured struct {
		Result struct {
			ExitCode *int `json:"exitCode"`
			Sandbox  struct {
				Backend string `json:"backend"`
			} `json:"sandbox"`
		} `json:"result"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &structured); err != nil || structured.Result.ExitCode == nil || *structured.Result.ExitCode != 3 || structured.Result.Sandbox.Backend != "oci" {
		t.Errorf("structured content %s (%v), want exit code 3 on the oci backend", raw, err)
	}

	// The call's facts come from the operator's flags, not from the
	// server's environment, and it runs in a container of its own.
	host, _ := os.Hostname()
	_, text = callTool(t, cs, "bash", map[string]any{
		"command": `echo "id=$DSH_SESSION_ID"; echo "jsonl=$DSH_SESSION_JSONL"; echo "stale=${DSH_STALE_SENTINEL:-absent}"; echo "pwd=$PWD"; hostname`,
		"timeout": 60000,
	})
	jsonlPath := jsonl.Path(e.root, session.Header{ID: "s1", Cwd: e.workspace}, jsonl.CompressionZstd)
	for _, want := range []string{"id=s1\n", "jsonl=" + jsonlPath + "\n", "stale=absent\n", "pwd=" + e.workspace + "\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("bash facts %q lack %q", text, want)
		}
	}
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if got := lines[len(lines)-1]; got == host || got == "" {
		t.Errorf("hostname inside = %q, the host's is %q; want the container's own", got, host)
	}

	// workdir picks the directory inside the sandbox.
	if err := os.Mkdir(filepath.Join(e.workspace, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, text := callTool(t, cs, "bash", map[string]any{"command": "pwd", "workdir": filepath.Join(e.workspace, "sub")}); text != filepath.Join(e.workspace, "sub")+"\n" {
		t.Errorf("pwd with workdir = %q", text)
	}
}

func TestMCPBadArgumentsRunNothing(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	cs := startMCP(t, e)
	marker := filepath.Join(e.workspace, "ran")
	touch := "touch '" + marker + "'"
	for _, tc := range []struct {
		name string
		tool string
		args map[string]any
		want string
	}{
		{"missing command", "bash", map[string]any{"timeout": 1000}, "command"},
		{"negative timeout", "bash", map[string]any{"command": touch, "timeout": -1}, "timeout"},
		{"relative workdir", "bash", map[string]any{"command": touch, "workdir": "sub"}, "workdir"},
		{"model-supplied env", "bash", map[string]any{"command": touch, "env": map[string]any{"DSH_SESSION_ID": "forged"}}, "env"},
		{"unknown job (output)", "job_output", map[string]any{"job_id": "bash-0123456789abcdef"}, "not found"},
		{"unknown job (kill)", "job_kill", map[string]any{"job_id": "bash-0123456789abcdef"}, "not found"},
		{"missing job id", "job_output", map[string]any{}, "job_id"},
	} {
		res, text := callTool(t, cs, tc.tool, tc.args)
		if !res.IsError || !strings.Contains(text, tc.want) {
			t.Errorf("%s: IsError %v, text %q; want a tool error naming %q", tc.name, res.IsError, text, tc.want)
		}
	}
	if _, err := os.Stat(marker); !os.IsNotExist(err) {
		t.Fatalf("a refused call ran: %s exists (%v)", marker, err)
	}
	// The legitimate variant runs and writes the workspace.
	if res, text := callTool(t, cs, "bash", map[string]any{"command": touch, "timeout": 60000}); res.IsError || text != "(no output)" {
		t.Errorf("legitimate call: IsError %v, text %q", res.IsError, text)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("the legitimate call did not write %s: %v", marker, err)
	}
}

func TestMCPBackgroundJobs(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	cs := startMCP(t, e)

	start := func(command string) string {
		t.Helper()
		res, text := callTool(t, cs, "bash", map[string]any{"command": command, "run_in_background": true})
		var out struct {
			JobID string `json:"jobId"`
		}
		raw, _ := json.Marshal(res.StructuredContent)
		if res.IsError || json.Unmarshal(raw, &out) != nil || !strings.HasPrefix(out.JobID, "bash-") || !strings.Contains(text, out.JobID) {
			t.Fatalf("background start of %q: IsError %v, text %q, structured %s; want a job id", command, res.IsError, text, raw)
		}
		return out.JobID
	}
	// readUntil reads the job's output until want has appeared in the
	// concatenated deltas; each read holds only new output.
	readUntil := func(id, want string) string {
		t.Helper()
		var all strings.Builder
		for !strings.Contains(all.String(), want) {
			res, text := callTool(t, cs, "job_output", map[string]any{"job_id": id})
			if res.IsError {
				t.Fatalf("job_output %s: %q", id, text)
			}
			all.WriteString(text + "\n")
		}
		return all.String()
	}

	// A job that ends on its own: its output arrives, then its outcome.
	done := start("echo first; echo second >&2; exit 4")
	got := readUntil(done, "[exit code: 4]")
	if !strings.Contains(got, "first") || !strings.Contains(got, "second") {
		t.Errorf("finished job output %q, want both streams", got)
	}

	// A long job: its first output is readable while it runs, kill stops it.
	long := start("echo started; exec sleep 300")
	readUntil(long, "started")
	if _, text := callTool(t, cs, "job_output", map[string]any{"job_id": long}); strings.Contains(text, "started") || !strings.Contains(text, "[running]") {
		t.Errorf("second read %q, want no repeated output and [running]", text)
	}
	res, text := callTool(t, cs, "job_kill", map[string]any{"job_id": long})
	if res.IsError || !strings.Contains(text, "[aborted]") || !strings.Contains(text, "[killed by signal:") {
		t.Errorf("job_kill: IsError %v, text %q; want the aborted, killed outcome", res.IsError, text)
	}
	if _, text := callTool(t, cs, "job_output", map[string]any{"job_id": long}); !strings.Contains(text, "[killed by signal:") || strings.Contains(text, "[running]") {
		t.Errorf("read after kill %q, want the final outcome", text)
	}
}

func TestMCPDisconnectKillsJobs(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	cs := startMCP(t, e)
	res, text := callTool(t, cs, "bash", map[string]any{"command": "echo up; exec sleep 300", "run_in_background": true})
	if res.IsError {
		t.Fatalf("background start: %q", text)
	}
	id := res.StructuredContent.(map[string]any)["jobId"].(string)
	for out := ""; !strings.Contains(out, "up"); {
		_, out = callTool(t, cs, "job_output", map[string]any{"job_id": id})
	}
	bundles := filepath.Join(e.state, "bundles")
	if entries, err := os.ReadDir(bundles); err != nil || len(entries) == 0 {
		t.Fatalf("while the job runs, %s has %d entries (%v); want its bundle", bundles, len(entries), err)
	}
	// Closing stdin ends the server, which kills the job and removes its
	// container before it exits.
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	for _, dir := range []string{bundles, filepath.Join(e.state, "runtime", "runc")} {
		if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
			t.Errorf("after disconnect %s holds %d entries (%v); want none", dir, len(entries), err)
		}
	}
}

func TestMCPRefusesBadFlags(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--policy", "no-such-policy"}, "--policy"},
		{[]string{"--max-jobs", "-1"}, "--max-jobs"},
		{[]string{"--runtime", "no-such-runtime"}, "runtime"},
		{[]string{"extra-argument"}, "no arguments"},
	} {
		r := run(t, nil, append(append([]string{"mcp"}, e.flags("s1")...), tc.args...)...)
		if (r.code != 2 && r.code != 125) || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("mcp %q: exit %d, stdout %q, stderr %q; want exit 2 or 125 naming %q before serving", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	// The legitimate variant serves until stdin ends, then exits 0.
	if r := run(t, nil, append(append([]string{"mcp"}, e.flags("s1")...), "--policy", "read-only")...); r.code != 0 {
		t.Errorf("mcp --policy read-only with empty stdin: exit %d, stderr %q; want 0", r.code, r.stderr)
	}
}

// TestMCPDeniedConnectionNamed: under a policy whose network is an
// allowlist, a call that tries another host ends its result with the
// note naming that host; a call that tries none has no note.
func TestMCPDeniedConnectionNamed(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	pol := filepath.Join(t.TempDir(), "egress.yaml")
	if err := os.WriteFile(pol, []byte("name: egress\nimage: host\nnetwork: {mode: allowlist, allow: [api.example.com]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cs := startMCP(t, e, "--policy", pol)
	note := "[network: the sandbox denied connections to denied.invalid:80; a policy decision, not a network fault]"
	res, text := callTool(t, cs, "bash", map[string]any{"command": "curl -sSf -m 10 http://denied.invalid/"})
	if res.IsError || !strings.HasSuffix(text, "\n"+note) || !strings.Contains(text, "[exit code: ") {
		t.Errorf("a denied connection: IsError %v, text %q; want a failed call whose text ends with %q", res.IsError, text, note)
	}
	if res, text := callTool(t, cs, "bash", map[string]any{"command": "echo quiet"}); res.IsError || text != "quiet\n" {
		t.Errorf("a call that tries no host: IsError %v, text %q; want %q", res.IsError, text, "quiet\n")
	}
}
