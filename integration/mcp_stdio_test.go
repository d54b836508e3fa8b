//go:build integration

package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMCPMalformedLinesKeepServing: the real `dsh-sandbox mcp`, fed
// malformed lines on stdin between real calls, answers each with a
// JSON-RPC error and goes on serving; a background job started before
// them still runs after them, and is stopped only when stdin ends.
func TestMCPMalformedLinesKeepServing(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	cmd := exec.Command(binary, append([]string{"mcp"}, e.flags("s1")...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	in, _ := cmd.StdinPipe()
	outPipe, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan map[string]any, 16)
	go func() {
		sc := bufio.NewScanner(outPipe)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				m = map[string]any{"notJSON": sc.Text()}
			}
			lines <- m
		}
		close(lines)
	}()
	send := func(s string) { io.WriteString(in, s+"\n") }
	await := func(id any) map[string]any {
		t.Helper()
		timeout := time.After(60 * time.Second)
		for {
			select {
			case m, ok := <-lines:
				if !ok {
					t.Fatalf("mcp ended waiting for id %v: %s", id, stderr.String())
				}
				if _, bad := m["notJSON"]; bad {
					t.Fatalf("mcp wrote a line that is not JSON: %v", m)
				}
				if fmt.Sprint(m["id"]) == fmt.Sprint(id) {
					return m
				}
			case <-timeout:
				t.Fatalf("no answer to id %v in 60 s: %s", id, stderr.String())
			}
		}
	}
	tool := func(id int, name, args string) string {
		send(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, name, args))
		return fmt.Sprint(await(float64(id))["result"])
	}
	send(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	await(float64(0))
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	started := tool(1, "bash", `{"command":"echo started; exec sleep 317","run_in_background":true}`)
	job := strings.TrimRight(strings.Fields(started[strings.Index(started, "bash-"):])[0], `".,:;]}`)

	for i, bad := range []struct {
		line string
		code float64
	}{{`{"jsonrpc":"2.0","id":5,"method":`, -32700}, {`not json at all`, -32700}, {`[1,2]`, -32600}, {`{"jsonrpc":"2.0"}`, -32600}} {
		send(bad.line)
		e, _ := await(nil)["error"].(map[string]any)
		if e["code"] != bad.code {
			t.Errorf("line %d %q: error %v, want code %v", i, bad.line, e, bad.code)
		}
	}
	var out string
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(out, "started"); time.Sleep(200 * time.Millisecond) {
		out += tool(2, "job_output", `{"job_id":"`+job+`"}`)
		if time.Now().After(deadline) {
			t.Fatalf("job %s output after the malformed lines: %q", job, out)
		}
	}
	if !strings.Contains(out, "[running]") {
		t.Errorf("job output after the malformed lines = %q, want it still running", out)
	}
	if fg := tool(3, "bash", `{"command":"echo still-serving"}`); !strings.Contains(fg, "still-serving") {
		t.Errorf("foreground call after the malformed lines = %s", fg)
	}
	in.Close() // the end of stdin ends the server and its jobs
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("mcp after stdin closed: %v: %s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("mcp still running 60 s after stdin closed")
	}
	if pids := processesWith("sleep 317"); len(pids) != 0 {
		t.Errorf("the job's process outlived the server: %v", pids)
	}
}
