//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/client"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// Attack regressions of issue 10 (the service is not root for its
// clients): each asserts that the attack is refused or contained and that
// the legitimate variant still works.

// freeTCP returns a loopback address nobody listens on.
func freeTCP(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// writeTokens writes a 0600 token file.
func writeTokens(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// rawUnix sends one request over the service socket and returns the
// status and body.
func rawUnix(t *testing.T, sock, method, path, body string) (int, string) {
	t.Helper()
	hc := socketHTTP(t, sock)
	req, _ := http.NewRequest(method, "http://x"+path, strings.NewReader(body))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

// startServeAt is startServe for a service whose --listen flags put its
// socket at sock instead of the default place in e's home.
func startServeAt(t *testing.T, e env, sock string, args ...string) *service {
	t.Helper()
	return startServeEnv(t, e, sock, nil, args...)
}

// startServeEnv is startServeAt with extraEnv added to the service's
// minimal environment.
func startServeEnv(t *testing.T, e env, sock string, extraEnv []string, args ...string) *service {
	t.Helper()
	sv := &service{
		sock:   sock,
		audit:  filepath.Join(e.data, "audit.jsonl"),
		stderr: &bytes.Buffer{},
		done:   make(chan struct{}),
	}
	full := append(append([]string{"serve"}, e.flags("")...), args...)
	sv.cmd = exec.Command(binary, full...)
	sv.cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, extraEnv...)
	sv.cmd.Stderr = &lockedWriter{w: sv.stderr}
	if err := sv.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { sv.cmd.Wait(); close(sv.done) }()
	t.Cleanup(func() { sv.stop(t) })
	var err error
	if sv.cl, err = newClient(t, "unix://"+sock, client.Options{}); err != nil {
		t.Fatal(err)
	}
	for range 1500 { // 30 s at most
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := sv.cl.Health(ctx)
		cancel()
		if err == nil {
			return sv
		}
		select {
		case <-sv.done:
			t.Fatalf("serve exited early: %s", sv.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("serve did not come up on %s: %s", sock, sv.stderr)
	return nil
}

func statusOf(err error) int {
	if err == nil {
		return 200
	}
	return api.HTTPStatus(err)
}

// (a) Client B (a second token on TCP) can neither see nor touch client
// A's (a socket peer, uid 0) session, transcript location or job.
func TestAttackServeCrossClient(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	addr := freeTCP(t)
	tokens := writeTokens(t, "# attacker\nb tok-b-0123456789\n")
	sv := startServe(t, e, "--listen", "unix://"+filepath.Join(e.home, "run", "sandbox.sock"), "--listen", "tcp://"+addr, "--token-file", tokens)
	b, err := newClient(t, "tcp://"+addr, client.Options{Token: "tok-b-0123456789"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	h := e.header("a-session")
	if _, err := sv.cl.Run(ctx, types.RunRequest{Session: h, Policy: "workspace-write", Command: "true"}); err != nil {
		t.Fatalf("A: Run = %v", err)
	}
	id, err := sv.cl.StartJob(ctx, types.RunRequest{Session: h, Policy: "workspace-write", Command: "echo secret-of-a; sleep 300"})
	if err != nil {
		t.Fatalf("A: StartJob = %v", err)
	}
	defer sv.cl.KillJob(ctx, h.ID, id)
	if !strings.HasPrefix(id, "bash-") || len(id) != len("bash-")+16 {
		t.Errorf("job id %q, want bash- and 16 random hex digits", id)
	}

	_, err = b.Snapshot(ctx, h)
	if statusOf(err) != 404 {
		t.Errorf("B: Snapshot(A's session) = %v, want 404", err)
	}
	if _, _, err := b.Locate(ctx, *h); statusOf(err) != 404 {
		t.Errorf("B: Locate(A's session) = %v, want 404", err)
	}
	if _, err := b.Run(ctx, types.RunRequest{Session: h, Policy: "workspace-write", Command: "true"}); statusOf(err) != 404 {
		t.Errorf("B: Run(A's session) = %v, want 404", err)
	}
	if _, err := b.Jobs(ctx, h.ID); statusOf(err) != 404 {
		t.Errorf("B: Jobs(A's session) = %v, want 404", err)
	}
	if o, err := b.JobOutput(ctx, h.ID, id); statusOf(err) != 404 {
		t.Errorf("B: JobOutput(A's job) = %q, %v; want 404", o.Stdout, err)
	}
	if err := b.KillJob(ctx, h.ID, id); statusOf(err) != 404 {
		t.Errorf("B: KillJob(A's job) = %v, want 404", err)
	}
	if err := b.RemoveJob(ctx, "", id); statusOf(err) != 404 {
		t.Errorf("B: RemoveJob(A's job, no session) = %v, want 404", err)
	}
	// A's job still runs and is A's.
	var got string
	for !strings.Contains(got, "secret-of-a") {
		o, err := sv.cl.JobOutput(ctx, h.ID, id)
		if err != nil || o.Done {
			t.Fatalf("A: JobOutput = %+v, %v; want the job still running", o, err)
		}
		got += o.Stdout
		time.Sleep(20 * time.Millisecond)
	}
	// The legitimate variant: B's own session works.
	resp, err := b.Run(ctx, types.RunRequest{Session: e.header("b-session"), Policy: "workspace-write", Command: "echo hi-b"})
	if err != nil || resp.Result.Stdout.Text != "hi-b\n" {
		t.Errorf("B: Run(own session) = %+v, %v; want hi-b", resp, err)
	}
	if jobs, err := sv.cl.Jobs(ctx, "b-session"); statusOf(err) != 404 {
		t.Errorf("A: Jobs(B's session) = %+v, %v; want 404", jobs, err)
	}
	if err := sv.cl.KillJob(ctx, h.ID, id); err != nil {
		t.Errorf("A: KillJob(own job) = %v", err)
	}
}

// (b) A client cannot make the service mount a system directory, or one
// reached through a link planted in the workspace, or one holding the
// service's own state.
func TestAttackServeWorkspaceScope(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	sv := startServe(t, e)
	ctx := context.Background()
	link := filepath.Join(e.workspace, "to-root")
	if err := os.Symlink("/", link); err != nil {
		t.Fatal(err)
	}
	base := filepath.Dir(e.workspace) // holds the dsh home, sessions and state
	marker := "touch " + filepath.Join(e.workspace, "ran")
	cases := []struct{ name, cwd string }{
		{"Etc", "/etc"},
		{"Root", "/"},
		{"LinkToRoot", link},
		{"ThroughLink", filepath.Join(link, "etc")},
		{"HoldsServiceState", base},
		{"InsideDSHHome", e.home},
	}
	for _, tc := range cases {
		h := &session.Header{ID: "scope-" + tc.name, CreatedAt: 1, Cwd: tc.cwd}
		_, err := sv.cl.Run(ctx, types.RunRequest{Session: h, Policy: "workspace-write", Command: marker})
		var fe *types.FieldError
		if statusOf(err) != 403 || !errors.As(err, &fe) || fe.Field != "session.cwd" {
			t.Errorf("%s: Run(cwd %s) = %v, want 403 naming session.cwd", tc.name, tc.cwd, err)
		}
	}
	status, body := rawUnix(t, sv.sock, http.MethodPost, "/v1/run", `{"policy":"workspace-write","command":"true","session":{"type":"session","version":0,"id":"etc","createdAt":0,"cwd":"/etc"}}`)
	if status != 403 || !strings.Contains(body, `"field":"session.cwd"`) {
		t.Errorf("raw POST with cwd /etc = %d %s, want 403 naming session.cwd", status, body)
	}
	if _, err := os.Stat(filepath.Join(e.workspace, "ran")); err == nil {
		t.Errorf("a refused call ran")
	}
	// The legitimate variant: the real workspace.
	resp, err := sv.cl.Run(ctx, types.RunRequest{Session: e.header("scope-ok"), Policy: "workspace-write", Command: "pwd"})
	if err != nil || resp.Result.Stdout.Text != e.workspace+"\n" {
		t.Errorf("Run(real workspace) = %+v, %v; want pwd %s", resp, err, e.workspace)
	}
}

// (c) Background jobs count against --max-concurrent: with 2 slots and a
// queue of 2, never more than 2 containers run, and the excess gets 429.
func TestAttackServeJobsRespectMaxConcurrent(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	// Without the warm pool: its prepared slots are containers that run
	// no call, and this test counts the runtime's containers.
	sv := startServe(t, e, "--max-concurrent", "2", "--max-queue", "2", "--pool=false")
	ctx := context.Background()
	type started struct{ session, id string }
	var jobs []started
	overloaded := 0
	for i := range 12 {
		s := fmt.Sprintf("job-%d", i)
		id, err := sv.cl.StartJob(ctx, types.RunRequest{Session: e.header(s), Policy: "workspace-write", Command: "sleep 300"})
		switch {
		case err == nil:
			jobs = append(jobs, started{s, id})
		case errors.Is(err, types.ErrOverloaded):
			overloaded++
		default:
			t.Errorf("StartJob %d = %v", i, err)
		}
	}
	defer func() {
		for _, j := range jobs {
			if err := sv.cl.KillJob(ctx, j.session, j.id); err != nil {
				t.Errorf("KillJob(%s) = %v", j.id, err)
			}
		}
	}()
	if len(jobs) != 4 || overloaded != 8 {
		t.Errorf("12 jobs at --max-concurrent 2 --max-queue 2: %d admitted, %d got 429; want 4 and 8", len(jobs), overloaded)
	}
	running := func() int {
		list, _ := exec.Command("runc", "--root", filepath.Join(e.state, "runtime", "runc"), "list", "-q").Output()
		return len(strings.Fields(string(list)))
	}
	for !strings.Contains(sv.metrics(t), "dsh_sandbox_in_flight 2") || running() < 2 {
		time.Sleep(50 * time.Millisecond)
	}
	for range 20 {
		if n := running(); n > 2 {
			t.Fatalf("%d containers run at once, want at most 2", n)
		}
		time.Sleep(25 * time.Millisecond)
	}
	if m := sv.metrics(t); !strings.Contains(m, "dsh_sandbox_queue_depth 2") {
		t.Errorf("metrics lack dsh_sandbox_queue_depth 2 with 2 jobs waiting")
	}
	// A foreground call is refused too: the jobs hold every slot and the
	// queue is full.
	if _, err := sv.cl.Run(ctx, types.RunRequest{Policy: "workspace-write", Command: "true"}); !errors.Is(err, types.ErrOverloaded) {
		t.Errorf("Run while jobs fill the slots and the queue = %v, want 429", err)
	}
}

// (d) A TCP client without the token that announces a large body and
// trickles it gets 401 from its headers and its connection closed.
func TestAttackServeSlowBodyWithoutToken(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	addr := freeTCP(t)
	tokens := writeTokens(t, "tok-123-legacy\n")
	startServe(t, e, "--listen", "unix://"+filepath.Join(e.home, "run", "sandbox.sock"), "--listen", "tcp://"+addr, "--token-file", tokens)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "POST /v1/run HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n{\"policy\":")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("no answer to a tokenless request with a pending body: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("tokenless request = %d, want 401", resp.StatusCode)
	}
	// Keep trickling: the server has closed the connection, so reading
	// ends (EOF or reset) instead of waiting for the rest of the body.
	for range 3 {
		c.Write([]byte(" "))
	}
	if n, err := br.Read(make([]byte, 1)); err == nil {
		t.Errorf("the server kept the connection open after the 401 (read %d bytes)", n)
	}
	// The legitimate variant: with the token a call works.
	cl, _ := newClient(t, "tcp://"+addr, client.Options{Token: "tok-123-legacy"})
	if resp, err := cl.Run(context.Background(), types.RunRequest{Policy: "workspace-write", Command: "echo ok"}); err != nil || resp.Result.Stdout.Text != "ok\n" {
		t.Errorf("Run with the token = %+v, %v", resp, err)
	}
}

// (e) A NUL in session.id is a 400 naming the field, not a 500.
func TestAttackServeNULInSessionID(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	sv := startServe(t, e)
	for _, path := range []string{"/v1/run", "/v1/jobs", "/v1/snapshot", "/v1/locate"} {
		body := `{"policy":"workspace-write","command":"true","session":{"type":"session","version":0,"id":"a\u0000b","createdAt":0}}`
		if path == "/v1/snapshot" || path == "/v1/locate" {
			body = `{"session":{"type":"session","version":0,"id":"a\u0000b","createdAt":0}}`
		}
		if status, got := rawUnix(t, sv.sock, http.MethodPost, path, body); status != 400 || !strings.Contains(got, `"field":"session.id"`) {
			t.Errorf("POST %s with a NUL in session.id = %d %s, want 400 naming session.id", path, status, got)
		}
	}
	if resp, err := sv.cl.Run(context.Background(), types.RunRequest{Session: e.header("a-b"), Policy: "workspace-write", Command: "echo ok"}); err != nil || resp.Result.Stdout.Text != "ok\n" {
		t.Errorf("Run without a NUL = %+v, %v", resp, err)
	}
}

// (f) The socket must be out of every call's reach: serve refuses a
// deployment whose workspace roots hold its home or socket, and a call
// that reaches the socket anyway (a policy mounting its directory) is
// refused as a sandboxed peer.
func TestAttackServeSocketOutOfReach(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	base := filepath.Dir(e.workspace)
	for name, args := range map[string][]string{
		"HomeInRoot":   {"--workspace-roots", base},
		"SocketInRoot": {"--workspace-roots", e.workspace, "--listen", "unix://" + filepath.Join(e.workspace, "s.sock")},
	} {
		full := append(append([]string{"serve"}, e.flags("")...), args...)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		cmd := exec.CommandContext(ctx, binary, full...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil || timedOut || !strings.Contains(string(out), "workspace-roots") {
			t.Errorf("%s: serve %v = %v %q, want a refusal naming --workspace-roots and both paths", name, args, err, out)
		}
		if name == "SocketInRoot" && !strings.Contains(string(out), filepath.Join(e.workspace, "s.sock")) {
			t.Errorf("%s: the refusal %q does not name the socket", name, out)
		}
	}

	// A policy that mounts the socket's directory into calls.
	sockDir := filepath.Join(t.TempDir(), "sock")
	sock := filepath.Join(sockDir, "sandbox.sock")
	pol := filepath.Join(t.TempDir(), "leaky.yaml")
	doc := fmt.Sprintf("name: leaky\nbackend: oci\nruntime: runc\nimage: host\nworkspace: rw\nmounts:\n  - {source: %q, target: %q, mode: rw}\n", sockDir, sockDir)
	if err := os.WriteFile(pol, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	sv := startServeAt(t, e, sock, "--listen", "unix://"+sock, "--policy-file", pol)
	probe := `import socket, sys
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
s.sendall(b"GET /v1/health HTTP/1.0\r\n\r\n")
data = b""
while True:
    d = s.recv(4096)
    if not d:
        break
    data += d
print(data.split(b"\r\n")[0].decode())`
	ctx := context.Background()
	resp, err := sv.cl.Run(ctx, types.RunRequest{Session: e.header("leaky"), Policy: "leaky", Env: []string{"SOCK=" + sock, "PROBE=" + probe}, Command: `python3 -c "$PROBE" "$SOCK"`})
	switch {
	case err != nil:
		// The call must run, or the sandboxed-peer check is not tested.
		t.Fatalf("the call that mounts the socket's directory did not run: %v", err)
	case strings.Contains(resp.Result.Stdout.Text, " 200 "):
		t.Errorf("a sandboxed call reached the service: %q", resp.Result.Stdout.Text)
	case !strings.Contains(resp.Result.Stdout.Text, " 403 "):
		t.Errorf("sandboxed peer probe = stdout %q stderr %q exit %v; want HTTP 403 (peer is a sandboxed call)", resp.Result.Stdout.Text, resp.Result.Stderr.Text, resp.Result.ExitCode)
	default:
		t.Logf("sandboxed peer probe: %s", strings.TrimSpace(resp.Result.Stdout.Text))
	}
	// The legitimate variant: the host client on the same socket.
	if err := sv.cl.Health(ctx); err != nil {
		t.Errorf("host client Health = %v", err)
	}
}
