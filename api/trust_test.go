package api_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/client"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
)

// serveTokens serves f's server on a loopback TCP listener with tokens and
// returns a client per token name.
func serveTokens(t *testing.T, f *fixture, tokens []api.TokenClient) (string, map[string]*client.Client) {
	t.Helper()
	l, err := api.ListenTCP("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	go f.srv.ServeClients(l, tokens)
	addr := l.Addr().String()
	out := map[string]*client.Client{}
	for _, tc := range tokens {
		if out[tc.Name], err = client.New("tcp://"+addr, checked(t, client.Options{Token: tc.Token})); err != nil {
			t.Fatal(err)
		}
	}
	return addr, out
}

func fieldOf(err error) string {
	var fe *types.FieldError
	if errors.As(err, &fe) {
		return fe.Field
	}
	return ""
}

func TestServerScopesWorkspace(t *testing.T) {
	roots := t.TempDir()
	work := filepath.Join(roots, "work")
	homeWork := filepath.Join(roots, "has-home")
	outside := t.TempDir()
	for _, d := range []string{work, filepath.Join(homeWork, ".dsh")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/", filepath.Join(work, "root-link")); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, &fakeExec{}, func(o *api.Options) {
		o.WorkspaceRoots = []string{roots}
		o.ProtectedPaths = map[string]string{"dsh home": filepath.Join(homeWork, ".dsh")}
	})
	ctx := context.Background()
	cases := []struct {
		name, cwd, workdir, field string
		forbidden                 bool
	}{
		{"Etc", "/etc", "", "session.cwd", true},
		{"Root", "/", "", "session.cwd", true},
		{"LinkToRoot", filepath.Join(work, "root-link"), "", "session.cwd", true},
		{"LinkThenDotDot", filepath.Join(work, "root-link", "tmp"), "", "session.cwd", true},
		{"OutsideRoots", outside, "", "session.cwd", true},
		{"HoldsDSHHome", homeWork, "", "session.cwd", true},
		{"InsideDSHHome", filepath.Join(homeWork, ".dsh"), "", "session.cwd", true},
		{"WorkdirEtc", work, "/etc", "workdir", true},
		{"Missing", filepath.Join(work, "nope"), "", "session.cwd", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := f.cl.Run(ctx, types.RunRequest{Session: header("s-"+tc.name, tc.cwd), Workdir: tc.workdir, Policy: policy.WorkspaceWrite, Command: "true"})
			want := 400
			if tc.forbidden {
				want = 403
			}
			if api.HTTPStatus(err) != want || fieldOf(err) != tc.field {
				t.Errorf("Run(cwd %s, workdir %q) = %v (status %d), want %d naming %s", tc.cwd, tc.workdir, err, api.HTTPStatus(err), want, tc.field)
			}
		})
	}
	if n := f.exec.calls.Load(); n != 0 {
		t.Errorf("refused requests ran %d calls", n)
	}
	// A call with no agent names its directory in cwd.
	if _, err := f.cl.Run(ctx, types.RunRequest{Cwd: "/etc", Policy: policy.WorkspaceWrite, Command: "true"}); api.HTTPStatus(err) != 403 || fieldOf(err) != "cwd" {
		t.Errorf("Run(cwd /etc, no session) = %v, want 403 naming cwd", err)
	}
	// The legitimate variant: the real workspace, a workdir inside it.
	if _, err := f.cl.Run(ctx, types.RunRequest{Session: header("ok", work), Workdir: work, Policy: policy.WorkspaceWrite, Command: "true"}); err != nil {
		t.Errorf("Run(cwd %s) = %v, want it run", work, err)
	}
	if got := f.exec.lastRequest(); got == nil || got.Session.Cwd != work {
		t.Errorf("executor got %+v, want cwd %s", got, work)
	}
}

func TestServerTokenClientRoots(t *testing.T) {
	mine, theirs := t.TempDir(), t.TempDir()
	f := newFixture(t, &fakeExec{}, nil)
	_, cls := serveTokens(t, f, []api.TokenClient{{Name: "a", Token: "tok-a", Roots: []string{mine}}})
	ctx := context.Background()
	if _, err := cls["a"].Run(ctx, types.RunRequest{Session: header("s", theirs), Policy: policy.WorkspaceWrite, Command: "true"}); api.HTTPStatus(err) != 403 || fieldOf(err) != "session.cwd" {
		t.Errorf("token client outside its roots = %v, want 403 naming session.cwd", err)
	}
	if _, err := cls["a"].Run(ctx, types.RunRequest{Session: header("s", mine), Policy: policy.WorkspaceWrite, Command: "true"}); err != nil {
		t.Errorf("token client inside its roots = %v, want it run", err)
	}
	if data, _ := os.ReadFile(f.audit); !strings.Contains(string(data), `"client":"token:a"`) {
		t.Errorf("the audit log does not name the client token:a: %s", data)
	}
}

func TestServerCrossClientIsolation(t *testing.T) {
	exec := &fakeExec{block: make(chan struct{}), started: make(chan struct{}, 4)}
	f := newFixture(t, exec, nil)
	defer close(exec.block)
	_, cls := serveTokens(t, f, []api.TokenClient{{Name: "a", Token: "tok-a"}, {Name: "b", Token: "tok-b"}})
	a, b := cls["a"], cls["b"]
	ctx := context.Background()
	h := header("s1", f.work)
	id, err := a.StartJob(ctx, types.RunRequest{Session: h, Policy: policy.WorkspaceWrite, Command: "sleep"})
	if err != nil {
		t.Fatal(err)
	}
	<-exec.started
	notFound := func(what string, err error) {
		t.Helper()
		if api.HTTPStatus(err) != 404 {
			t.Errorf("client b: %s of a's session = %v, want 404", what, err)
		}
	}
	_, err = b.Snapshot(ctx, h)
	notFound("snapshot", err)
	_, _, err = b.Locate(ctx, *h)
	notFound("locate", err)
	_, err = b.Run(ctx, types.RunRequest{Session: h, Policy: policy.WorkspaceWrite, Command: "true"})
	notFound("run", err)
	_, err = b.StartJob(ctx, types.RunRequest{Session: h, Policy: policy.WorkspaceWrite, Command: "true"})
	notFound("start job", err)
	_, err = b.Jobs(ctx, "s1")
	notFound("job list", err)
	_, err = b.JobOutput(ctx, "s1", id)
	notFound("job output", err)
	notFound("job kill", b.KillJob(ctx, "s1", id))
	notFound("job remove", b.RemoveJob(ctx, "s1", id))
	// Under its own session name b does not see a's job either.
	_, err = b.JobOutput(ctx, "", id)
	notFound("job output (no session)", err)
	if jobs, err := b.Jobs(ctx, ""); err != nil || len(jobs) != 0 {
		t.Errorf("client b: Jobs(no session) = %+v, %v; want none", jobs, err)
	}
	if o, err := a.JobOutput(ctx, "s1", id); err != nil || o.Done {
		t.Errorf("a's job after b's attempts = %+v, %v; want still running", o, err)
	}
	// The legitimate variant: b's own session works; a still owns s1.
	bid, err := b.StartJob(ctx, types.RunRequest{Session: header("s2", f.work), Policy: policy.WorkspaceWrite, Command: "sleep"})
	if err != nil {
		t.Errorf("client b: StartJob(own session) = %v", err)
	}
	if jobs, err := b.Jobs(ctx, "s2"); err != nil || len(jobs) != 1 || jobs[0].ID != bid {
		t.Errorf("client b: Jobs(s2) = %+v, %v; want [%s]", jobs, err, bid)
	}
	if _, ok, err := b.Locate(ctx, *header("s2", f.work)); err != nil || !ok {
		t.Errorf("client b: Locate(own session) = %t, %v", ok, err)
	}
	if _, ok, err := a.Locate(ctx, *h); err != nil || !ok {
		t.Errorf("client a: Locate(own session) = %t, %v", ok, err)
	}
	if jobs, err := a.Jobs(ctx, "s1"); err != nil || len(jobs) != 1 || jobs[0].ID != id {
		t.Errorf("client a: Jobs(s1) = %+v, %v; want [%s]", jobs, err, id)
	}
}

func TestServerJobsHoldSlots(t *testing.T) {
	exec := &fakeExec{block: make(chan struct{}), started: make(chan struct{}, 16)}
	f := newFixture(t, exec, func(o *api.Options) { o.MaxConcurrent, o.MaxQueue, o.MaxJobsPerSession = 2, 2, 100 })
	ctx := context.Background()
	var ids []string
	overloaded := 0
	for i := range 12 {
		id, err := f.cl.StartJob(ctx, types.RunRequest{Session: header(fmt.Sprint("s", i), f.work), Policy: policy.WorkspaceWrite, Command: "sleep"})
		switch {
		case err == nil:
			ids = append(ids, id)
		case errors.Is(err, types.ErrOverloaded):
			overloaded++
		default:
			t.Fatalf("StartJob %d = %v", i, err)
		}
	}
	if len(ids) != 4 || overloaded != 8 {
		t.Errorf("12 jobs at limit 2 + queue 2: %d admitted, %d refused with 429; want 4 and 8", len(ids), overloaded)
	}
	<-exec.started
	<-exec.started
	for !strings.Contains(metrics(t, f), "dsh_sandbox_queue_depth 2") {
		time.Sleep(5 * time.Millisecond)
	}
	if m := metrics(t, f); !strings.Contains(m, "dsh_sandbox_in_flight 2") {
		t.Errorf("metrics while 2 jobs run and 2 wait lack dsh_sandbox_in_flight 2")
	}
	if _, err := f.cl.Run(ctx, types.RunRequest{Policy: policy.WorkspaceWrite, Command: "x"}); !errors.Is(err, types.ErrOverloaded) {
		t.Errorf("foreground call while jobs fill every slot and the queue = %v, want 429", err)
	}
	if n := exec.calls.Load(); n != 2 {
		t.Errorf("executor runs %d calls, want 2 (the limit)", n)
	}
	// Killing a queued job gives up its queue place; ending a running one
	// lets a queued one run.
	if err := f.cl.KillJob(ctx, "s3", ids[3]); err != nil {
		t.Errorf("KillJob(queued) = %v", err)
	}
	close(exec.block)
	<-exec.started
	for _, s := range []string{"s0", "s1", "s2"} {
		for {
			jobs, err := f.cl.Jobs(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) == 1 && jobs[0].Done {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	if n := exec.calls.Load(); n != 3 {
		t.Errorf("executor ran %d calls, want 3 (the killed queued job never ran)", n)
	}
}

func TestServerJobsPerSessionCap(t *testing.T) {
	exec := &fakeExec{block: make(chan struct{}), started: make(chan struct{}, 16)}
	f := newFixture(t, exec, func(o *api.Options) { o.MaxConcurrent, o.MaxJobsPerSession = 8, 2 })
	defer close(exec.block)
	ctx := context.Background()
	req := types.RunRequest{Session: header("s1", f.work), Policy: policy.WorkspaceWrite, Command: "sleep"}
	for range 2 {
		if _, err := f.cl.StartJob(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	body := fmt.Sprintf(`{"policy":"workspace-write","command":"sleep","session":{"type":"session","version":0,"id":"s1","createdAt":0,"cwd":%q}}`, f.work)
	status, hdr, got := rawPost(t, f.sock, "/v1/jobs", body, nil)
	if status != 429 || hdr.Get("Retry-After") == "" || !strings.Contains(got, "max-jobs-per-session") {
		t.Errorf("third live job of s1 = %d (Retry-After %q) %s, want 429 naming the cap", status, hdr.Get("Retry-After"), got)
	}
	req.Session = header("s2", f.work)
	if _, err := f.cl.StartJob(ctx, req); err != nil {
		t.Errorf("first job of s2 = %v, want it started (the cap is per session)", err)
	}
}

// TestServerTokenCheckedBeforeBody: a request without a valid token is
// answered 401 from its headers and its connection closed, however slowly
// its announced body trickles in.
func TestServerTokenCheckedBeforeBody(t *testing.T) {
	f := newFixture(t, &fakeExec{}, nil)
	addr, cls := serveTokens(t, f, []api.TokenClient{{Name: "a", Token: "tok-a"}})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"policy\":")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer to a tokenless request: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 || !resp.Close {
		t.Errorf("tokenless request with a pending body = %d (close %t), want 401 and the connection closed", resp.StatusCode, resp.Close)
	}
	// The server closes its side: trickling more and reading ends in EOF
	// or a reset, never in a second answer.
	c.Write([]byte(`"workspace-write"`))
	if n, err := br.Read(make([]byte, 1)); err == nil {
		t.Errorf("connection still open after the 401 (read %d bytes)", n)
	}
	if n := f.exec.calls.Load(); n != 0 {
		t.Errorf("a tokenless request ran %d calls", n)
	}
	// The legitimate variant.
	if _, err := cls["a"].Run(context.Background(), types.RunRequest{Policy: policy.WorkspaceWrite, Command: "x"}); err != nil {
		t.Errorf("Run with the token = %v", err)
	}
}

func TestServerNULIsBadRequest(t *testing.T) {
	f := newFixture(t, &fakeExec{}, nil)
	hdr := func(extra string) string {
		return fmt.Sprintf(`,"session":{"type":"session","version":0,"id":"s","createdAt":0,"cwd":%q%s}`, f.work, extra)
	}
	cases := []struct{ name, extra, field string }{
		{"SessionID", `,"session":{"type":"session","version":0,"id":"a\u0000b","createdAt":0}`, "session.id"},
		{"SessionCwd", `,"session":{"type":"session","version":0,"id":"s","createdAt":0,"cwd":"/tmp\u0000x"}`, "session.cwd"},
		{"ParentSession", hdr(`,"parentSession":"p\u0000"`), "session.parentSession"},
		{"AgentPreset", hdr(`,"agentPreset":"p\u0000"`), "session.agentPreset"},
		{"Cwd", `,"cwd":"/tmp\u0000"`, "cwd"},
		{"Workdir", `,"workdir":"/tmp\u0000"`, "workdir"},
		{"Env", `,"env":["A=1\u0000"]`, "env[0]"},
		{"CallID", `,"callId":"c\u0000"`, "callId"},
	}
	for _, tc := range cases {
		body := `{"policy":"workspace-write","command":"true"` + tc.extra + `}`
		for _, path := range []string{"/v1/run", "/v1/jobs"} {
			if status, got, _ := rawPostBody(t, f.sock, path, body); status != 400 || !strings.Contains(got, `"field":"`+tc.field+`"`) {
				t.Errorf("%s: POST %s = %d %s, want 400 naming %s", tc.name, path, status, got, tc.field)
			}
		}
	}
	for _, path := range []string{"/v1/snapshot", "/v1/locate"} {
		body := `{"session":{"type":"session","version":0,"id":"a\u0000b","createdAt":0}}`
		if status, got, _ := rawPostBody(t, f.sock, path, body); status != 400 || !strings.Contains(got, `"field":"session.id"`) {
			t.Errorf("POST %s with a NUL in session.id = %d %s, want 400 naming session.id", path, status, got)
		}
	}
	for path, field := range map[string]string{
		"/v1/jobs?session=a%00b": "session", "/v1/jobs/bash-1?session=a%00b": "session",
		"/v1/jobs/bash%00?session=s": "id", "/v1/health?probe=%00": "probe",
	} {
		resp, err := httpClient(t, f.sock).Get("http://x" + path)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(data), `"field":"`+field+`"`) {
			t.Errorf("GET %s = %d %s, want 400 naming %s", path, resp.StatusCode, data, field)
		}
	}
	if n := f.exec.calls.Load(); n != 0 {
		t.Errorf("requests with a NUL ran %d calls", n)
	}
	// The legitimate variant.
	if _, err := f.cl.Run(context.Background(), types.RunRequest{Session: header("a-b", f.work), Policy: policy.WorkspaceWrite, Command: "true"}); err != nil {
		t.Errorf("Run without a NUL = %v", err)
	}
}

func rawPostBody(t *testing.T, sock, path, body string) (int, string, http.Header) {
	t.Helper()
	status, hdr, got := rawPost(t, sock, path, body, nil)
	return status, got, hdr
}
