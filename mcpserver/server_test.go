package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// fakeExecutor records requests. A command "block" writes "started\n" and
// waits until its context ends (an aborted result); "fail" returns a
// sandbox error; anything else prints its command and exits with 3 when
// it contains "exit3".
type fakeExecutor struct {
	mu   sync.Mutex
	reqs []sandbox.Request
}

func (f *fakeExecutor) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, *req)
	f.mu.Unlock()
	code := 0
	switch {
	case req.Command == "fail":
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "runtime is gone")
	case req.Command == "block":
		if req.Stdout != nil {
			_, _ = io.WriteString(req.Stdout, "started\n")
		}
		if req.Stderr != nil {
			_, _ = io.WriteString(req.Stderr, "warming up\n")
		}
		<-ctx.Done()
		return &sandbox.Result{Signal: "SIGTERM", Aborted: true, Stdout: sandbox.Stream{Text: "started\n"}}, nil
	case strings.Contains(req.Command, "exit3"):
		code = 3
	}
	if req.Stdout != nil {
		_, _ = io.WriteString(req.Stdout, "ran: "+req.Command+"\n")
	}
	return &sandbox.Result{ExitCode: &code, Stdout: sandbox.Stream{Text: "ran: " + req.Command + "\n"}, Stderr: sandbox.Stream{Text: "note\n"}}, nil
}

func (f *fakeExecutor) requests() []sandbox.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

var testPolicy = sandbox.Policy{Name: "workspace-write", Backend: "oci", Runtime: "runc", Image: "host", Workspace: "rw", Transcript: "ro"}

func connect(t *testing.T, ex sandbox.Executor) *mcp.ClientSession {
	t.Helper()
	srv, err := New(Options{
		Executor: ex,
		Policy:   testPolicy,
		Session:  sandbox.Session{ID: "s1", Cwd: "/srv/proj", TranscriptDir: "/h/sessions/--srv-proj--/s1"},
		Snapshot: func(context.Context) ([]string, error) {
			return []string{"DSH_SESSION_ID=s1", "DSH_SHELL=1"}, nil
		},
		Env: []string{"GOFLAGS=-mod=mod"},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.MCP().Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cs.Close()
		ss.Wait()
		if err := srv.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return cs
}

func call(t *testing.T, cs *mcp.ClientSession, name string, args any) (*mcp.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("CallTool(%s, %v): protocol error %v, want a result", name, args, err)
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	return res, text.String()
}

func TestListTools(t *testing.T) {
	cs := connect(t, &fakeExecutor{})
	res, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range res.Tools {
		names = append(names, tool.Name)
		schema, _ := json.Marshal(tool.InputSchema)
		switch tool.Name {
		case ToolBash:
			var parsed struct {
				Properties map[string]map[string]any `json:"properties"`
			}
			if err := json.Unmarshal(schema, &parsed); err != nil {
				t.Fatal(err)
			}
			if tm := parsed.Properties["timeout"]; tm["type"] != "integer" || tm["exclusiveMinimum"] != 0.0 {
				t.Errorf("bash timeout schema %v, want a single type integer with exclusiveMinimum 0", tm)
			}
			for _, want := range []string{`"command"`, `"timeout"`, `"workdir"`, `"run_in_background"`, `"required":["command"]`, `"additionalProperties":false`} {
				if !strings.Contains(string(schema), want) {
					t.Errorf("bash input schema %s lacks %s", schema, want)
				}
			}
		case ToolJobOutput, ToolJobKill:
			if !strings.Contains(string(schema), `"required":["job_id"]`) {
				t.Errorf("%s input schema %s, want job_id required", tool.Name, schema)
			}
		}
	}
	slices.Sort(names)
	if want := []string{ToolBash, ToolJobKill, ToolJobOutput}; !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}
}

func TestBashForeground(t *testing.T) {
	ex := &fakeExecutor{}
	cs := connect(t, ex)
	res, text := call(t, cs, ToolBash, map[string]any{"command": "echo hi; exit3", "timeout": 5000, "workdir": "/srv/proj/sub"})
	if res.IsError {
		t.Fatalf("IsError with %q, want a result", text)
	}
	if want := "ran: echo hi; exit3\n[stderr]\nnote\n[exit code: 3]"; text != want {
		t.Errorf("text = %q, want %q", text, want)
	}
	var out BashOutput
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &out); err != nil || out.Result == nil || out.Result.ExitCode == nil || *out.Result.ExitCode != 3 {
		t.Errorf("structured content %s (%v), want the result with exit code 3", raw, err)
	}
	reqs := ex.requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests, want 1", len(reqs))
	}
	r := reqs[0]
	if r.Command != "echo hi; exit3" || r.TimeoutMs != 5000 || r.Workdir != "/srv/proj/sub" {
		t.Errorf("request command/timeout/workdir = %q %d %q", r.Command, r.TimeoutMs, r.Workdir)
	}
	if r.Session.ID != "s1" || r.Session.TranscriptDir == "" || r.Policy.Name != "workspace-write" {
		t.Errorf("request session %+v policy %q, want the operator's", r.Session, r.Policy.Name)
	}
	if !slices.Equal(r.DSHEnv, []string{"DSH_SESSION_ID=s1", "DSH_SHELL=1"}) || !slices.Equal(r.Env, []string{"GOFLAGS=-mod=mod"}) || r.Stdin != nil {
		t.Errorf("request dshEnv %v env %v stdin %q, want the snapshot, the operator's env and no stdin", r.DSHEnv, r.Env, r.Stdin)
	}

	// A successful command renders without an exit code line.
	if _, text := call(t, cs, ToolBash, map[string]any{"command": "true"}); text != "ran: true\n[stderr]\nnote\n" {
		t.Errorf("text = %q", text)
	}
	if r := ex.requests()[1]; r.TimeoutMs != 0 || r.Workdir != "" {
		t.Errorf("defaults: timeout %d workdir %q, want 0 and empty (the policy's and the session's)", r.TimeoutMs, r.Workdir)
	}
}

func TestBashBadArgumentsRunNothing(t *testing.T) {
	ex := &fakeExecutor{}
	cs := connect(t, ex)
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{"missing command", map[string]any{"timeout": 1000}, "command"},
		{"empty command", map[string]any{"command": "  "}, "command: required"},
		{"NUL in command", map[string]any{"command": "a\x00b"}, "NUL"},
		{"negative timeout", map[string]any{"command": "ls", "timeout": -5}, "timeout"},
		{"zero timeout", map[string]any{"command": "ls", "timeout": 0}, "timeout"},
		{"relative workdir", map[string]any{"command": "ls", "workdir": "sub"}, "workdir"},
		{"model-supplied env", map[string]any{"command": "ls", "env": map[string]string{"DSH_SESSION_ID": "forged"}}, "env"},
		{"model-supplied stdin", map[string]any{"command": "ls", "stdin": "data"}, "stdin"},
		{"command of the wrong type", map[string]any{"command": 42}, "command"},
	} {
		res, text := call(t, cs, ToolBash, tc.args)
		if !res.IsError || !strings.Contains(text, tc.want) {
			t.Errorf("%s: IsError %v, text %q; want a tool error naming %q", tc.name, res.IsError, text, tc.want)
		}
	}
	for _, tool := range []string{ToolJobOutput, ToolJobKill} {
		for _, args := range []map[string]any{{}, {"job_id": ""}, {"job_id": "bash-0000000000000000"}} {
			if res, text := call(t, cs, tool, args); !res.IsError || !strings.Contains(text, "job_id") {
				t.Errorf("%s %v: IsError %v, text %q; want a tool error naming job_id", tool, args, res.IsError, text)
			}
		}
	}
	if n := len(ex.requests()); n != 0 {
		t.Fatalf("bad arguments ran %d calls, want none", n)
	}
	// The legitimate variant runs.
	if res, text := call(t, cs, ToolBash, map[string]any{"command": "ls", "timeout": 1, "workdir": "/tmp"}); res.IsError || text == "" {
		t.Errorf("legitimate call: IsError %v, text %q", res.IsError, text)
	}
	if n := len(ex.requests()); n != 1 {
		t.Errorf("%d calls ran, want 1", n)
	}
}

func TestSandboxFailureIsToolError(t *testing.T) {
	cs := connect(t, &fakeExecutor{})
	res, text := call(t, cs, ToolBash, map[string]any{"command": "fail"})
	if !res.IsError || !strings.Contains(text, "sandbox unavailable") || !strings.Contains(text, "runtime is gone") {
		t.Errorf("IsError %v, text %q; want a tool error saying the sandbox is unavailable", res.IsError, text)
	}
}

func TestBackgroundJob(t *testing.T) {
	ex := &fakeExecutor{}
	cs := connect(t, ex)
	res, text := call(t, cs, ToolBash, map[string]any{"command": "block", "run_in_background": true})
	if res.IsError {
		t.Fatalf("start: %q", text)
	}
	var started BashOutput
	raw, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(raw, &started); err != nil || !strings.HasPrefix(started.JobID, "bash-") || !strings.Contains(text, started.JobID) {
		t.Fatalf("start: structured %s, text %q; want a bash-… job id in both", raw, text)
	}
	id := started.JobID

	// Read until the first output arrived; each read returns only new output.
	var first string
	for !strings.Contains(first, "started") {
		_, out := call(t, cs, ToolJobOutput, map[string]any{"job_id": id})
		first += out
	}
	if !strings.Contains(first, "[running]") {
		t.Errorf("first read %q, want [running]", first)
	}
	if _, again := call(t, cs, ToolJobOutput, map[string]any{"job_id": id}); strings.Contains(again, "started") || !strings.Contains(again, "[running]") {
		t.Errorf("second read %q, want no repeated output, still running", again)
	}

	res, killed := call(t, cs, ToolJobKill, map[string]any{"job_id": id})
	if res.IsError || !strings.Contains(killed, "[aborted]") || !strings.Contains(killed, "[killed by signal: SIGTERM]") {
		t.Errorf("job_kill: IsError %v, %q; want the aborted outcome", res.IsError, killed)
	}
	if _, after := call(t, cs, ToolJobOutput, map[string]any{"job_id": id}); !strings.Contains(after, "(no new output)") || !strings.Contains(after, "[killed by signal: SIGTERM]") {
		t.Errorf("read after kill %q, want no new output and the outcome", after)
	}
	// Killing an ended job is not an error.
	if res, text := call(t, cs, ToolJobKill, map[string]any{"job_id": id}); res.IsError {
		t.Errorf("second kill: %q, want no error", text)
	}
	if reqs := ex.requests(); len(reqs) != 1 || reqs[0].Session.ID != "s1" || len(reqs[0].DSHEnv) != 2 {
		t.Errorf("requests = %+v, want one call with the session and snapshot", reqs)
	}
}

func TestNewRejectsBadOptions(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		want string
	}{
		{Options{Policy: testPolicy}, "Executor"},
		{Options{Executor: &fakeExecutor{}}, "Policy"},
		{Options{Executor: &fakeExecutor{}, Policy: testPolicy, Env: []string{"DSH_SESSION_ID=x"}}, "Env[0]"},
		{Options{Executor: &fakeExecutor{}, Policy: testPolicy, Env: []string{"NOEQUALS"}}, "Env[0]"},
	} {
		_, err := New(tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("New(%+v) = %v, want an invalid-argument error naming %s", tc.opts, err, tc.want)
		}
	}
	if _, err := New(Options{Executor: &fakeExecutor{}, Policy: testPolicy, Env: []string{"LANG=C"}}); err != nil {
		t.Errorf("New with ordinary env: %v", err)
	}
}

func TestRenderJob(t *testing.T) {
	zero, two := 0, 2
	for _, tc := range []struct {
		name string
		in   sandbox.JobOutput
		want string
	}{
		{"running, nothing new", sandbox.JobOutput{}, "(no new output)\n[running]"},
		{"running with output", sandbox.JobOutput{Stdout: "a\n", Stderr: "b"}, "a\n[stderr]\nb\n[running]"},
		{"stdout without newline before stderr", sandbox.JobOutput{Stdout: "a", Stderr: "b\n"}, "a\n[stderr]\nb\n[running]"},
		{"done ok", sandbox.JobOutput{Stdout: "x\n", Done: true, Result: &sandbox.Result{ExitCode: &zero}}, "x\n[exit code: 0]"},
		{"done failing", sandbox.JobOutput{Done: true, Result: &sandbox.Result{ExitCode: &two}}, "(no new output)\n[exit code: 2]"},
		{"timed out", sandbox.JobOutput{Done: true, Result: &sandbox.Result{Signal: "SIGKILL", TimedOut: true, TimeoutMs: 50}}, "(no new output)\n[timed out after 50ms]\n[killed by signal: SIGKILL]"},
		{"dropped while running", sandbox.JobOutput{Stdout: "tail", StdoutDropped: 10}, "tail\n[10 earlier bytes of stdout were not read in time; the spill file named when the job ends holds them]\n[running]"},
		{"dropped, done, spilled", sandbox.JobOutput{StderrDropped: 5, Done: true, Result: &sandbox.Result{ExitCode: &zero, Stderr: sandbox.Stream{SpillPath: "/s/spill/c.stderr"}}},
			"(no new output)\n[5 earlier bytes of stderr were not read in time; full output: /s/spill/c.stderr]\n[exit code: 0]"},
		{"sandbox error", sandbox.JobOutput{Done: true, Err: errors.New("runtime is gone")}, "(no new output)\n[sandbox error: runtime is gone]"},
	} {
		if got := RenderJob(tc.in); got != tc.want {
			t.Errorf("%s: RenderJob = %q, want %q", tc.name, got, tc.want)
		}
	}
}
