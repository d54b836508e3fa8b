//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/client"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/contributors"
	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/oci"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// service is a `dsh-sandbox serve` process of a test.
type service struct {
	cmd    *exec.Cmd
	sock   string
	audit  string
	stderr *bytes.Buffer
	cl     *client.Client
	done   chan struct{}
}

// startServe starts the service on a socket in e's home and waits until
// it answers its health check. Cleanup stops it with SIGTERM.
func startServe(t *testing.T, e env, args ...string) *service {
	t.Helper()
	return startServeAt(t, e, filepath.Join(e.home, "run", "sandbox.sock"), args...)
}

func (sv *service) stop(t *testing.T) {
	select {
	case <-sv.done:
		return
	default:
	}
	sv.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-sv.done:
	case <-time.After(60 * time.Second):
		sv.cmd.Process.Kill()
		<-sv.done
		t.Errorf("serve did not stop within 60s of SIGTERM")
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func (sv *service) metrics(t *testing.T) string {
	t.Helper()
	hc := socketHTTP(t, sv.sock)
	resp, err := hc.Get("http://x/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return string(data)
}

func (e env) header(id string) *session.Header {
	return &session.Header{ID: id, CreatedAt: 1, Cwd: e.workspace}
}

// leftovers lists what calls left behind in e's state directory: bundles,
// runtime containers, mounts, and the cgroups of the given instances.
func leftovers(t *testing.T, e env, instances []string) []string {
	t.Helper()
	var out []string
	bundles, _ := os.ReadDir(filepath.Join(e.state, "bundles"))
	for _, b := range bundles {
		out = append(out, "bundle "+b.Name())
	}
	list, err := exec.Command("runc", "--root", filepath.Join(e.state, "runtime", "runc"), "list", "-q").Output()
	if err == nil {
		for _, id := range strings.Fields(string(list)) {
			out = append(out, "container "+id)
		}
	}
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mountinfo), "\n") {
		if strings.Contains(line, e.state) {
			out = append(out, "mount "+line)
		}
	}
	for _, inst := range instances {
		matches, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "dsh-sandbox", inst))
		for _, m := range matches {
			out = append(out, "cgroup "+m)
		}
	}
	return out
}

func instances(e env) []string {
	locks, _ := filepath.Glob(filepath.Join(e.state, "instances", "*.lock"))
	var ids []string
	for _, l := range locks {
		ids = append(ids, strings.TrimSuffix(filepath.Base(l), ".lock"))
	}
	return ids
}

func TestServeAPIWithRealBackend(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	sv := startServe(t, e)
	ctx := context.Background()
	h := e.header("s1")
	jsonlPath := jsonl.Path(e.root, *h, jsonl.CompressionZstd)

	resp, err := sv.cl.Run(ctx, types.RunRequest{Session: h, Policy: "workspace-write", Command: "env | grep ^DSH_ | sort; pwd"})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	want := strings.Join([]string{"DSH_HOME=" + e.home, "DSH_SESSION_ID=s1", "DSH_SESSION_JSONL=" + jsonlPath, "DSH_SHELL=1", e.workspace}, "\n") + "\n"
	if got := resp.Result.Stdout.Text; got != want || resp.Result.Sandbox.Backend != "oci" {
		t.Errorf("foreground stdout =\n%s\nwant\n%s(backend %q)", got, want, resp.Result.Sandbox.Backend)
	}

	var out, errOut bytes.Buffer
	sresp, err := sv.cl.Stream(ctx, types.RunRequest{Session: h, Policy: "workspace-write", Command: "echo one; echo two >&2; exit 3"}, &out, &errOut)
	if err != nil || out.String() != "one\n" || errOut.String() != "two\n" || *sresp.Result.ExitCode != 3 {
		t.Errorf("Stream = %q / %q, %+v, %v; want one / two, exit 3", out.String(), errOut.String(), sresp, err)
	}

	id, err := sv.cl.StartJob(ctx, types.RunRequest{Session: h, Policy: "workspace-write", Command: "echo started; sleep 300"})
	if err != nil {
		t.Fatalf("StartJob = %v", err)
	}
	jobStdoutUntil(t, sv.cl, "s1", id, "started")
	if jobs, err := sv.cl.Jobs(ctx, "s1"); err != nil || len(jobs) != 1 || jobs[0].ID != id {
		t.Errorf("Jobs = %+v, %v; want [%s]", jobs, err, id)
	}
	if err := sv.cl.KillJob(ctx, "s1", id); err != nil {
		t.Fatalf("KillJob = %v", err)
	}
	if o, err := sv.cl.JobOutput(ctx, "s1", id); err != nil || !o.Done || o.Result == nil || o.Result.Signal == "" {
		t.Errorf("JobOutput after kill = %+v, %v; want done and killed by a signal", o, err)
	}

	snap, err := sv.cl.Snapshot(ctx, h)
	if err != nil || !slices.Contains(snap, "DSH_SESSION_JSONL="+jsonlPath) {
		t.Errorf("Snapshot = %q, %v; want DSH_SESSION_JSONL=%s", snap, err, jsonlPath)
	}
	loc, ok, err := sv.cl.Locate(ctx, *h)
	if err != nil || !ok || loc.Path != jsonlPath {
		t.Errorf("Locate = %+v, %t, %v; want %s", loc, ok, err, jsonlPath)
	}
	if _, err := os.Stat(filepath.Dir(filepath.Dir(jsonlPath))); err != nil {
		t.Logf("project dir: %v", err)
	}
	m := sv.metrics(t)
	for _, want := range []string{`dsh_sandbox_executions_total{backend="oci",outcome="ok"} 1`, `outcome="exit_nonzero"} 1`, `outcome="aborted"} 1`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	sv.stop(t)
	r := run(t, nil, "audit", "verify", sv.audit)
	if r.code != 0 || !strings.Contains(r.stdout, "ok: 3 records") {
		t.Errorf("audit verify = %d %q %q, want ok: 3 records", r.code, r.stdout, r.stderr)
	}
	if l := leftovers(t, e, nil); len(l) != 0 {
		t.Errorf("left behind: %v", l)
	}
}

func TestServeExecSameAsLocal(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	sv := startServe(t, e)
	cmdline := "echo out; env | grep ^DSH_ | sort; echo err >&2; exit 7"
	local := run(t, nil, append(append([]string{"exec"}, e.flags("s1")...), "--", cmdline)...)
	remote := run(t, nil, append(append([]string{"exec", "--server", "unix://" + checkedSocket(t, sv.sock)}, e.flags("s1")...), "--", cmdline)...)
	if local.code != 7 || remote.code != local.code || remote.stdout != local.stdout || remote.stderr != local.stderr {
		t.Errorf("exec --server = %d %q %q; local exec = %d %q %q", remote.code, remote.stdout, remote.stderr, local.code, local.stdout, local.stderr)
	}
	bad := run(t, nil, append(append([]string{"exec", "--server", "unix://" + checkedSocket(t, sv.sock), "--policy", "nope"}, e.flags("s1")...), "--", "true")...)
	if bad.code != 2 {
		t.Errorf("exec --server with an unknown policy exited %d (%q), want 2", bad.code, bad.stderr)
	}
}

func TestServeBadInputStartsNothing(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	sv := startServe(t, e)
	touch := "touch " + filepath.Join(e.workspace, "ran")
	hdr := func(s string) string { return `,"session":` + s }
	cases := []struct{ name, extra, field string }{
		{"UnknownField", `,"dshEnv":["DSH_HOME=/"]`, "dshEnv"},
		{"RelativeCwd", hdr(`{"type":"session","version":0,"id":"s","createdAt":0,"cwd":"rel"}`), "session.cwd"},
		{"EmptyID", hdr(`{"type":"session","version":0,"id":"","createdAt":0}`), "session.id"},
		{"Version1", hdr(`{"type":"session","version":1,"id":"s","createdAt":0}`), "session.version"},
		{"DSHEnv", `,"env":["DSH_SESSION_ID=forged"]`, "env[0]"},
		{"NegativeTimeout", `,"timeoutMs":-1`, "timeoutMs"},
	}
	hc := socketHTTP(t, sv.sock)
	post := func(body string) (int, string) {
		resp, err := hc.Post("http://x/v1/run", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	for _, tc := range cases {
		body := fmt.Sprintf(`{"policy":"workspace-write","command":%q%s}`, touch, tc.extra)
		if status, got := post(body); status != 400 || !strings.Contains(got, `"field":"`+tc.field+`"`) {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.name, status, got, tc.field)
		}
	}
	for _, body := range []string{`{"policy":`, fmt.Sprintf(`{"policy":"nope","command":%q}`, touch),
		`{"policy":"workspace-write","command":"` + strings.Repeat("x", 10<<20) + `"}`} {
		if status, got := post(body); status/100 != 4 || !strings.Contains(got, `"field"`) {
			t.Errorf("POST %.60q = %d %s, want a 4xx naming a field", body, status, got)
		}
	}
	if _, err := os.Stat(filepath.Join(e.workspace, "ran")); err == nil {
		t.Errorf("a refused request ran its command")
	}
	if m := sv.metrics(t); strings.Contains(m, "dsh_sandbox_executions_total{") {
		t.Errorf("a refused request reached the executor")
	}
}

func TestServeTCPToken(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	tokenFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokenFile, []byte("tok-123\n"), 0o600)
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	addr := l.Addr().String()
	l.Close()
	startServe(t, e, "--listen", "unix://"+filepath.Join(e.home, "run", "sandbox.sock"), "--listen", "tcp://"+addr, "--token-file", tokenFile)
	for tok, want := range map[string]error{"": types.ErrUnauthorized, "wrong": types.ErrUnauthorized, "tok-123": nil} {
		cl, _ := newClient(t, "tcp://"+addr, client.Options{Token: tok})
		if err := cl.Health(context.Background()); !errors.Is(err, want) && !(want == nil && err == nil) {
			t.Errorf("Health with token %q = %v, want %v", tok, err, want)
		}
	}
	os.Chmod(tokenFile, 0o644)
	r := run(t, nil, append(append([]string{"serve"}, e.flags("")...), "--listen", "tcp://"+addr, "--token-file", tokenFile)...)
	if r.code == 0 || !strings.Contains(r.stderr, "token") {
		t.Errorf("serve with a world-readable token file = %d %q, want a refusal", r.code, r.stderr)
	}
}

func TestServeLoad(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	sv := startServe(t, e, "--max-concurrent", "4", "--max-queue", "64")
	const clients, total = 16, 400
	idle := rss(sv.cmd.Process.Pid)
	var next, failed, peak atomic.Int64
	var wg sync.WaitGroup
	sampling := make(chan struct{})
	go func() {
		for {
			select {
			case <-sampling:
				return
			case <-time.After(100 * time.Millisecond):
				if r := rss(sv.cmd.Process.Pid); r > peak.Load() {
					peak.Store(r)
				}
			}
		}
	}()
	for range clients {
		wg.Go(func() {
			for next.Add(1) <= total {
				resp, err := sv.cl.Run(context.Background(), types.RunRequest{Session: e.header("load"), Policy: "workspace-write", Command: "echo ok"})
				if err != nil || resp.Result.Stdout.Text != "ok\n" {
					failed.Add(1)
					t.Logf("call failed: %v", err)
				}
			}
		})
	}
	wg.Wait()
	close(sampling)
	t.Logf("service RSS: idle %d KiB, peak under %d clients %d KiB", idle, clients, peak.Load())
	if n := failed.Load(); n != 0 {
		t.Errorf("%d of %d calls failed", n, total)
	}
	insts := instances(e)
	sv.stop(t)
	if l := leftovers(t, e, insts); len(l) != 0 {
		t.Errorf("left behind after %d calls: %v", total, l)
	}
	if r := run(t, nil, "audit", "verify", sv.audit); r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("ok: %d records", total)) {
		t.Errorf("audit verify = %d %q %q", r.code, r.stdout, r.stderr)
	}
}

func TestServeOverloadAnswers429(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	sv := startServe(t, e, "--max-concurrent", "4", "--max-queue", "8")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ok, overloaded, other atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, err := sv.cl.Run(ctx, types.RunRequest{Policy: "workspace-write", Command: "sleep 2"})
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, types.ErrOverloaded):
				overloaded.Add(1)
			default:
				other.Add(1)
				t.Logf("call failed: %v", err)
			}
		})
	}
	wg.Wait()
	if ok.Load() < 12 || overloaded.Load() == 0 || other.Load() != 0 || ok.Load()+overloaded.Load() != 20 {
		t.Errorf("20 calls at limit 4 + queue 8: %d ok, %d 429, %d other; want ≥ 12 ok, some 429, none other", ok.Load(), overloaded.Load(), other.Load())
	}
}

func TestServeCrashLeavesNothingAfterRestart(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	sv := startServe(t, e, "--max-concurrent", "8")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	early := make(chan error, 8) // calls that ended before the kill
	var killed atomic.Bool
	for range 8 {
		wg.Go(func() {
			_, err := sv.cl.Run(ctx, types.RunRequest{Policy: "workspace-write", Command: "sleep 600"})
			if !killed.Load() {
				early <- err
			}
		})
	}
	// Wait (60 s at most) until all 8 calls are in flight and their 8
	// containers run, then kill the service outright.
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-early:
			t.Fatalf("a sleep 600 call ended before the service was killed: %v; %s", err, sv.stderr)
		default:
		}
		list, _ := exec.Command("runc", "--root", filepath.Join(e.state, "runtime", "runc"), "list", "-q").Output()
		if strings.Contains(sv.metrics(t), "dsh_sandbox_in_flight 8") && len(strings.Fields(string(list))) >= 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("8 calls not running after 60 s (runc list: %q); %s", list, sv.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	dead := instances(e)
	killed.Store(true) // the calls' ends below are the kill's doing
	sv.cmd.Process.Kill()
	<-sv.done
	// The lifeline: each call's stub sees the dead service's end of its
	// control channel close and ends the call, before any reap.
	for t0 := time.Now(); ; time.Sleep(20 * time.Millisecond) {
		pids := processesWith("sleep 600")
		if len(pids) == 0 {
			t.Logf("the calls ended %v after kill -9 of the service", time.Since(t0))
			break
		}
		if time.Since(t0) > 2*time.Second {
			t.Errorf("2 s after kill -9 of the service, its calls still run: %v", pids)
			break
		}
	}
	wg.Wait()
	if l := leftovers(t, e, dead); len(l) == 0 {
		t.Logf("nothing to reap after kill -9 (containers died with the service)")
	}
	sv2 := startServe(t, e)
	if l := leftovers(t, e, dead); len(l) != 0 {
		t.Errorf("after restart, left behind by the killed instance: %v", l)
	}
	if pids := processesWith("sleep 600"); len(pids) != 0 {
		t.Errorf("after restart, processes of the killed calls still run: %v", pids)
	}
	if _, err := sv2.cl.Run(context.Background(), types.RunRequest{Policy: "workspace-write", Command: "true"}); err != nil {
		t.Errorf("Run on the restarted service = %v", err)
	}
	sv2.stop(t)
	if r := run(t, nil, "audit", "verify", sv2.audit); r.code != 0 {
		t.Errorf("audit verify after the crash = %d %q %q", r.code, r.stdout, r.stderr)
	}
}

// jobStdoutUntil reads a job's stdout until it holds want and returns
// it; the job ending without it, or 60 s passing, fails t.
func jobStdoutUntil(t *testing.T, cl *client.Client, session, id, want string) string {
	t.Helper()
	var got string
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(got, want); time.Sleep(20 * time.Millisecond) {
		o, err := cl.JobOutput(context.Background(), session, id)
		if err != nil {
			t.Fatalf("JobOutput(%s) = %v", id, err)
		}
		got += o.Stdout
		if !strings.Contains(got, want) && (o.Done || time.Now().After(deadline)) {
			t.Fatalf("job %s stdout %q lacks %q (done %t, result %+v)", id, got, want, o.Done, o.Result)
		}
	}
	return got
}

// rss returns the resident set size of pid in KiB, 0 when unknown.
func rss(pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb
		}
	}
	return 0
}

// BenchmarkServiceOverhead compares one `true` call through the service
// (client → Unix socket → api.Server → executor) with the same call on the
// executor in-process; the difference is the service path's overhead.
func BenchmarkServiceOverhead(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root and runc")
	}
	base := b.TempDir()
	for _, d := range []string{filepath.Dir(base), base} { // searchable for the mapped root
		if err := os.Chmod(d, 0o711); err != nil {
			b.Fatal(err)
		}
	}
	ex, err := oci.New(oci.Options{Service: driver.Service{StateDir: filepath.Join(base, "state")}})
	if err != nil {
		b.Fatal(err)
	}
	defer ex.Close()
	reg := overlay.NewRegistry()
	if _, err := contributors.Install(reg, func() persistence.Locator { return nil }); err != nil {
		b.Fatal(err)
	}
	p, _ := policy.Builtin(policy.WorkspaceWrite)
	if p, err = policy.Normalize(p); err != nil {
		b.Fatal(err)
	}
	srv, err := api.NewServer(api.Options{Executor: ex, Policies: map[string]sandbox.Policy{p.Name: p}, Registry: reg, Home: base})
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(base, "run", "s.sock")
	l, err := api.ListenUnix(sock)
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(l, "")
	defer srv.Shutdown(context.Background())
	cl, _ := newClient(b, "unix://"+sock, client.Options{})
	ctx := context.Background()
	// Interleave the two paths so machine load affects both alike, and
	// report medians.
	var direct, served []time.Duration
	for b.Loop() {
		start := time.Now()
		res, err := ex.Run(ctx, &sandbox.Request{Command: "true", Policy: p, DSHEnv: []string{"DSH_HOME=" + base, "DSH_SHELL=1"}, Session: sandbox.Session{Cwd: base}})
		if err != nil || *res.ExitCode != 0 {
			b.Fatal(err)
		}
		direct = append(direct, time.Since(start))
		start = time.Now()
		resp, err := cl.Run(ctx, types.RunRequest{Policy: p.Name, Command: "true", Cwd: base})
		if err != nil || *resp.Result.ExitCode != 0 {
			b.Fatal(err)
		}
		served = append(served, time.Since(start))
	}
	median := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2]
	}
	md, ms := median(direct), median(served)
	b.ReportMetric(float64(md.Microseconds())/1000, "inprocess-ms")
	b.ReportMetric(float64(ms.Microseconds())/1000, "service-ms")
	b.ReportMetric(float64((ms-md).Microseconds())/1000, "overhead-ms")
}
