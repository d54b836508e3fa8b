package api_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/client"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/contributors"
	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// fakeExec is a hand-written Executor: it echoes the command to Stdout,
// records the request and, when block is set, waits for it or for ctx.
type fakeExec struct {
	calls   atomic.Int64
	block   chan struct{}
	started chan struct{}
	mu      sync.Mutex
	last    *sandbox.Request
}

func (f *fakeExec) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	f.calls.Add(1)
	f.mu.Lock()
	f.last = req
	f.mu.Unlock()
	if req.Command == "fail" {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "runtime %q is missing", "fake")
	}
	if req.Command == "hash-stdin" {
		return hashStdin(ctx, req)
	}
	if req.Stdout != nil {
		io.WriteString(req.Stdout, "out:"+req.Command+"\n")
	}
	if req.Stderr != nil {
		io.WriteString(req.Stderr, "err\n")
	}
	zero := 0
	res := &sandbox.Result{ExitCode: &zero, Stdout: sandbox.Stream{Text: "out:" + req.Command + "\n"}, Sandbox: sandbox.Info{Backend: "fake", Policy: req.Policy.Name}}
	if f.block != nil {
		if f.started != nil {
			f.started <- struct{}{}
		}
		select {
		case <-f.block:
		case <-ctx.Done():
			res.ExitCode, res.Signal, res.Aborted = nil, "SIGKILL", true
		}
	}
	return res, nil
}

func (f *fakeExec) lastRequest() *sandbox.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last
}

type fakeLocator struct{}

func (fakeLocator) Locate(h session.Header) (persistence.Location, bool) {
	return persistence.Location{Kind: persistence.KindJSONL, Path: "/sessions/" + h.ID + "/session.jsonl"}, true
}

type fixture struct {
	// work is a real workspace directory the scope checks accept.
	work   string
	exec   *fakeExec
	srv    *api.Server
	cl     *client.Client
	sock   string
	audit  string
	served chan error
}

func newFixture(t testing.TB, exec *fakeExec, mutate func(*api.Options)) *fixture {
	t.Helper()
	dir := t.TempDir()
	reg := overlay.NewRegistry()
	if _, err := contributors.Install(reg, func() persistence.Locator { return fakeLocator{} }); err != nil {
		t.Fatal(err)
	}
	p, _ := policy.Builtin(policy.WorkspaceWrite)
	p, err := policy.Normalize(p)
	if err != nil {
		t.Fatal(err)
	}
	auditPath := filepath.Join(dir, "audit.jsonl")
	audit, err := api.OpenAudit(auditPath, api.AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opts := api.Options{
		Executor: exec,
		Policies: map[string]sandbox.Policy{p.Name: p},
		Registry: reg,
		Locator:  func() persistence.Locator { return fakeLocator{} },
		Home:     "/home/dsh",
		Audit:    audit,
	}
	if mutate != nil {
		mutate(&opts)
	}
	srv, err := api.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "run", "s.sock")
	l, err := api.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{work: filepath.Join(dir, "work"), exec: exec, srv: srv, sock: sock, audit: auditPath, served: make(chan error, 1)}
	if err := os.Mkdir(f.work, 0o755); err != nil {
		t.Fatal(err)
	}
	go func() { f.served <- srv.Serve(l, "") }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		audit.Close()
	})
	if f.cl, err = client.New("unix://"+sock, checked(t, client.Options{})); err != nil {
		t.Fatal(err)
	}
	return f
}

func header(id, cwd string) *session.Header { return &session.Header{ID: id, Cwd: cwd} }

func TestServerRunBuildsSnapshotItself(t *testing.T) {
	f := newFixture(t, &fakeExec{}, nil)
	ctx := context.Background()
	resp, err := f.cl.Run(ctx, types.RunRequest{Session: header("s1", f.work), Policy: policy.WorkspaceWrite, Command: "ls", Env: []string{"A=1"}})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if resp.Result.Stdout.Text != "out:ls\n" || resp.ExecutionID == "" || !strings.Contains(resp.Rendered, "out:ls") {
		t.Errorf("Run = %+v, want stdout out:ls and an execution id", resp)
	}
	req := f.exec.lastRequest()
	want := []string{"DSH_HOME=/home/dsh", "DSH_SESSION_ID=s1", "DSH_SESSION_JSONL=/sessions/s1/session.jsonl", "DSH_SHELL=1"}
	if strings.Join(req.DSHEnv, ",") != strings.Join(want, ",") {
		t.Errorf("executor got DSHEnv %q, want %q", req.DSHEnv, want)
	}
	if req.Session.TranscriptDir != "/sessions/s1" || req.Session.Cwd != f.work || req.CallID != resp.ExecutionID {
		t.Errorf("executor got session %+v call %q, want transcript /sessions/s1, cwd %s, call %q", req.Session, req.CallID, f.work, resp.ExecutionID)
	}
	// The socket peer (this process) is the harness user who owns the
	// session directory.
	if want := (sandbox.Owner{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Set: true}); req.Session.Owner != want {
		t.Errorf("executor got session owner %+v, want the peer's credentials %+v", req.Session.Owner, want)
	}
}

func TestServerStream(t *testing.T) {
	f := newFixture(t, &fakeExec{}, nil)
	var out, errOut bytes.Buffer
	resp, err := f.cl.Stream(context.Background(), types.RunRequest{Policy: policy.WorkspaceWrite, Command: "echo", Cwd: f.work}, &out, &errOut)
	if err != nil {
		t.Fatalf("Stream = %v", err)
	}
	if out.String() != "out:echo\n" || errOut.String() != "err\n" || resp.Result == nil {
		t.Errorf("Stream wrote %q / %q, result %+v; want out:echo / err and a result", out.String(), errOut.String(), resp.Result)
	}
	// A sandbox error before any output keeps its class over the stream.
	_, err = f.cl.Stream(context.Background(), types.RunRequest{Policy: policy.WorkspaceWrite, Command: "fail"}, &out, &errOut)
	if !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("Stream(fail) = %v, want ErrUnavailable", err)
	}
}

// rawPost sends body to the socket and returns status, headers and body.
func rawPost(t *testing.T, sock, path, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	hc := httpClient(t, sock)
	req, _ := http.NewRequest(http.MethodPost, "http://x"+path, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(data)
}

func TestServerRefusesBadInputAndRunsNothing(t *testing.T) {
	f := newFixture(t, &fakeExec{}, nil)
	big := `{"policy":"workspace-write","command":"` + strings.Repeat("x", 10<<20) + `"}`
	cases := []struct {
		name, body, field string
		status            int
	}{
		{"Malformed", `{"policy":`, "body", 400},
		{"UnknownField", `{"policy":"workspace-write","command":"x","dshEnv":["DSH_HOME=/"]}`, "dshEnv", 400},
		{"TenMegabytes", big, "body", 413},
		{"RelativeCwd", `{"policy":"workspace-write","command":"x","session":{"type":"session","version":0,"id":"s","createdAt":0,"cwd":"rel"}}`, "session.cwd", 400},
		{"WindowsCwd", `{"policy":"workspace-write","command":"x","session":{"type":"session","version":0,"id":"s","createdAt":0,"cwd":"C:\\work\\agent"}}`, "session.cwd", 400},
		{"EmptyID", `{"policy":"workspace-write","command":"x","session":{"type":"session","version":0,"id":"","createdAt":0}}`, "session.id", 400},
		{"Version1", `{"policy":"workspace-write","command":"x","session":{"type":"session","version":1,"id":"s","createdAt":0}}`, "session.version", 400},
		{"DSHEnv", `{"policy":"workspace-write","command":"x","env":["DSH_SESSION_ID=forged"]}`, "env[0]", 400},
		{"UnknownPolicy", `{"policy":"yolo","command":"x"}`, "policy", 400},
		{"NegativeTimeout", `{"policy":"workspace-write","command":"x","timeoutMs":-5}`, "timeoutMs", 400},
	}
	for _, tc := range cases {
		for _, path := range []string{"/v1/run", "/v1/jobs"} {
			status, hdr, body := rawPost(t, f.sock, path, tc.body, nil)
			if status != tc.status || !strings.Contains(body, `"field":"`+tc.field+`"`) || hdr.Get("Content-Type") != "application/json" {
				t.Errorf("%s: POST %s = %d %s, want %d naming field %s", tc.name, path, status, body, tc.status, tc.field)
			}
		}
	}
	if n := f.exec.calls.Load(); n != 0 {
		t.Errorf("executor ran %d calls for bad requests, want 0", n)
	}
	if _, hdr, _ := rawPost(t, f.sock, "/v1/run", "{}", map[string]string{"X-Big": strings.Repeat("h", 64<<10)}); hdr.Get("X-Request-Id") != "" {
		t.Errorf("a 64 KiB header was served, want 431")
	}
}

func TestServerOverloadAnswers429(t *testing.T) {
	exec := &fakeExec{block: make(chan struct{}), started: make(chan struct{}, 16)}
	f := newFixture(t, exec, func(o *api.Options) { o.MaxConcurrent, o.MaxQueue = 2, 1 })
	req := types.RunRequest{Policy: policy.WorkspaceWrite, Command: "sleep"}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Go(func() {
			_, err := f.cl.Run(context.Background(), req)
			errs <- err
		})
	}
	<-exec.started
	<-exec.started // two run, one waits in the queue
	for !strings.Contains(metrics(t, f), "dsh_sandbox_queue_depth 1") {
		time.Sleep(5 * time.Millisecond)
	}
	status, hdr, body := rawPost(t, f.sock, "/v1/run", `{"policy":"workspace-write","command":"x"}`, nil)
	if status != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(body, `"class":"overloaded"`) {
		t.Errorf("POST beyond the queue = %d (Retry-After %q) %s, want 429 with Retry-After", status, hdr.Get("Retry-After"), body)
	}
	close(exec.block)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("admitted call = %v, want nil", err)
		}
	}
}

func TestServerClientDisconnectCancels(t *testing.T) {
	exec := &fakeExec{block: make(chan struct{}), started: make(chan struct{}, 1)}
	f := newFixture(t, exec, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := f.cl.Run(ctx, types.RunRequest{Policy: policy.WorkspaceWrite, Command: "sleep"})
		done <- err
	}()
	<-exec.started
	cancel()
	<-done
	// The handler records the aborted call in the audit log.
	for {
		data, _ := os.ReadFile(f.audit)
		if strings.Contains(string(data), `"aborted":true`) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestServerJobs(t *testing.T) {
	exec := &fakeExec{block: make(chan struct{}), started: make(chan struct{}, 1)}
	f := newFixture(t, exec, nil)
	ctx := context.Background()
	id, err := f.cl.StartJob(ctx, types.RunRequest{Session: header("s1", f.work), Policy: policy.WorkspaceWrite, Command: "sleep"})
	if err != nil || !regexp.MustCompile(`^bash-[0-9a-f]{16}$`).MatchString(id) {
		t.Fatalf("StartJob = %q, %v; want bash-<16 hex digits>", id, err)
	}
	<-exec.started
	jobs, err := f.cl.Jobs(ctx, "s1")
	if err != nil || len(jobs) != 1 || jobs[0].ID != id {
		t.Errorf("Jobs(s1) = %+v, %v; want %s", jobs, err, id)
	}
	if others, _ := f.cl.Jobs(ctx, "s2"); len(others) != 0 {
		t.Errorf("Jobs(s2) = %+v, want none (jobs belong to their session)", others)
	}
	if _, err := f.cl.JobOutput(ctx, "s2", id); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("JobOutput(s2, %s) = %v, want ErrNotFound", id, err)
	}
	if err := f.cl.KillJob(ctx, "s1", id); err != nil {
		t.Fatalf("KillJob = %v", err)
	}
	out, err := f.cl.JobOutput(ctx, "s1", id)
	if err != nil || !out.Done || out.Result == nil || !out.Result.Aborted || out.Stdout != "out:sleep\n" {
		t.Errorf("JobOutput after kill = %+v, %v; want done, aborted, stdout out:sleep", out, err)
	}
}

func TestServerSnapshotLocateEnvHealth(t *testing.T) {
	f := newFixture(t, &fakeExec{}, nil)
	ctx := context.Background()
	env, err := f.cl.Snapshot(ctx, nil)
	if err != nil || strings.Join(env, ",") != "DSH_HOME=/home/dsh,DSH_SHELL=1" {
		t.Errorf("Snapshot(nil) = %q, %v; want DSH_HOME and DSH_SHELL only", env, err)
	}
	loc, ok, err := f.cl.Locate(ctx, *header("s1", f.work))
	if err != nil || !ok || loc.Path != "/sessions/s1/session.jsonl" {
		t.Errorf("Locate(s1) = %+v, %t, %v", loc, ok, err)
	}
	decls, err := f.cl.Declarations(ctx)
	if err != nil || len(decls) < 4 {
		t.Errorf("Declarations = %+v, %v; want the four built-ins", decls, err)
	}
	if err := f.cl.Health(ctx); err != nil {
		t.Errorf("Health = %v", err)
	}
	if f.exec.calls.Load() != 0 {
		t.Errorf("inspection endpoints ran the executor")
	}
	hc := httpClient(t, f.sock)
	resp, err := hc.Get("http://x/v1/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(data, api.OpenAPI) || !bytes.Contains(data, []byte("/v1/run")) {
		t.Errorf("GET /v1/openapi.yaml did not serve the checked-in file")
	}
}

func TestServerAuditChainVerifies(t *testing.T) {
	f := newFixture(t, &fakeExec{}, nil)
	for i := range 3 {
		if _, err := f.cl.Run(context.Background(), types.RunRequest{Session: header("s1", f.work), Policy: policy.WorkspaceWrite, Command: "c", Env: []string{"SECRETISH=value"}, CallID: "tool-" + string(rune('a'+i))}); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(f.audit)
	if err != nil {
		t.Fatal(err)
	}
	n, _, err := api.VerifyAudit(bytes.NewReader(data))
	if err != nil || n != 3 {
		t.Errorf("VerifyAudit = %d, %v; want 3 records, nil", n, err)
	}
	for _, forbidden := range []string{"value", `"c"`} {
		if bytes.Contains(data, []byte(forbidden)) {
			t.Errorf("audit log contains %s: env values and command text must not be logged", forbidden)
		}
	}
	for _, want := range []string{`"SECRETISH"`, `"DSH_SESSION_ID"`, `"callId":"tool-a"`, `"sessionId":"s1"`, `"policy":"workspace-write"`} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("audit log lacks %s", want)
		}
	}
}

func metrics(t *testing.T, f *fixture) string {
	t.Helper()
	resp, err := httpClient(t, f.sock).Get("http://x/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data)
}

func TestServerMetrics(t *testing.T) {
	f := newFixture(t, &fakeExec{}, nil)
	f.cl.Run(context.Background(), types.RunRequest{Policy: policy.WorkspaceWrite, Command: "x"})
	m := metrics(t, f)
	for _, want := range []string{`dsh_sandbox_executions_total{backend="oci",outcome="ok"} 1`, "dsh_sandbox_in_flight 0", "dsh_sandbox_queue_depth 0", "dsh_sandbox_leaked_objects 0", "dsh_sandbox_execution_duration_seconds_bucket",
		"go_goroutines ", "go_memstats_heap_alloc_bytes ", "process_open_fds ", "process_resident_memory_bytes "} {
		if !strings.Contains(m, want) {
			t.Errorf("GET /metrics lacks %q", want)
		}
	}
}

func TestServerShutdownDrainsThenCancels(t *testing.T) {
	exec := &fakeExec{block: make(chan struct{}), started: make(chan struct{}, 1)}
	f := newFixture(t, exec, nil)
	done := make(chan error, 1)
	go func() {
		_, err := f.cl.Run(context.Background(), types.RunRequest{Policy: policy.WorkspaceWrite, Command: "sleep"})
		done <- err
	}()
	<-exec.started
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no grace: cancel running calls at once
	if err := f.srv.Shutdown(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Shutdown = %v, want context.Canceled (a call had to be cancelled)", err)
	}
	if err := <-f.served; !errors.Is(err, http.ErrServerClosed) {
		t.Errorf("Serve = %v, want http.ErrServerClosed", err)
	}
	<-done
	if _, err := os.Stat(f.sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket still exists after shutdown: %v", err)
	}
}

func TestOpenAPIListsEveryRoute(t *testing.T) {
	var doc struct {
		Paths map[string]map[string]any `json:"paths"`
	}
	if err := yaml.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.yaml does not parse: %v", err)
	}
	routes := map[string][]string{
		"/v1/run": {"post"}, "/v1/jobs": {"post", "get"}, "/v1/jobs/{id}": {"get", "delete"},
		"/v1/jobs/{id}/kill": {"post"}, "/v1/jobs/{id}/stdin": {"post"}, "/v1/env": {"get"}, "/v1/snapshot": {"post"},
		"/v1/locate": {"post"}, "/v1/health": {"get"}, "/v1/openapi.yaml": {"get"}, "/metrics": {"get"},
		"/v1/calls": {"get"}, "/v1/calls/{id}": {"delete"},
	}
	for path, methods := range routes {
		for _, m := range methods {
			if _, ok := doc.Paths[path][m]; !ok {
				t.Errorf("openapi.yaml lacks %s %s", m, path)
			}
		}
	}
	if len(doc.Paths) != len(routes) {
		t.Errorf("openapi.yaml has %d paths, the server %d", len(doc.Paths), len(routes))
	}
}
