package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/egress"
	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// newEgressExecutor is newTestExecutor whose egress proxies reach the
// made-up internet of inet, with fixtures.EgressImage imported.
func newEgressExecutor(t *testing.T, inet *fixtures.Internet) *Executor {
	t.Helper()
	requireEngine(t)
	e, err := New(t.Context(), Options{
		Service: driver.Service{StateDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))},
		Network: egress.Network{LookupNetIP: inet.LookupNetIP, DialContext: inet.DialContext},
	})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.ImportRootfs(t.Context(), egressRootfsTar(t), fixtures.EgressImage, testImageEnv); err != nil {
		t.Fatalf("ImportRootfs(%q) = %v", fixtures.EgressImage, err)
	}
	return e
}

// egressPolicy is testPolicy with network allowlist on fixtures.EgressImage.
func egressPolicy(t testing.TB) sandbox.Policy {
	t.Helper()
	p := testPolicy(t)
	p.Image = fixtures.EgressImage
	p.Network = policy.NetworkAllowlist
	p.NetworkAllow = []string{"web.test", "tls.test:443", "private.test"}
	p.NetworkDeny = []string{"denied.test"}
	p, err := policy.Normalize(p)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestEgressAllowlist runs one call on the engine that tries every way
// out, the HTTP proxy, the SOCKS5 server and a Go program that honours
// the proxy variables among them, and checks which worked and the
// record.
func TestEgressAllowlist(t *testing.T) {
	inet := fixtures.NewInternet(t)
	e := newEgressExecutor(t, inet)
	cwd := t.TempDir()
	fixtures.ProxyClient(t, cwd, inet.CACertPEM)
	res, err := e.Run(context.Background(), &sandbox.Request{
		Command: fixtures.ProbeShell + fixtures.EgressProbes,
		Session: sandbox.Session{ID: "s", Cwd: cwd},
		Policy:  egressPolicy(t),
	})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	fixtures.CheckProbes(t, res.Stdout.Text, res.Stderr.Text, fixtures.EgressProbesWant)
	inet.Check(t)
	fixtures.CheckEgressRecord(t, res.Egress)
	if l := leftovers(t, e); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.opts.StateDir, "egress", e.instance)); len(ents) != 0 {
		t.Errorf("the instance's egress FIFO directory holds %d entries after the call, want none", len(ents))
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.opts.StateDir, "egress")); len(ents) != 2 {
		t.Errorf("the egress directory holds %d entries after Close, want resolv.conf and nsswitch.conf only", len(ents))
	}
}

// TestEgressConcurrent runs 16 calls on the engine at once, each with 13
// requests in flight through its proxy (208 connections), and checks
// that every request succeeded and is in its own call's record.
func TestEgressConcurrent(t *testing.T) {
	inet := fixtures.NewInternet(t)
	e := newEgressExecutor(t, inet)
	fixtures.RunConcurrentEgress(t, func(session string) (string, string, any, error) {
		res, err := e.Run(context.Background(), &sandbox.Request{
			Command: fixtures.ConcurrentCommand,
			Session: sandbox.Session{ID: session, Cwd: t.TempDir()},
			Policy:  egressPolicy(t),
		})
		if err != nil {
			return "", "", nil, err
		}
		return res.Stdout.Text, res.Stderr.Text, res.Egress, nil
	})
	inet.Check(t)
	if l := leftovers(t, e); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}

// TestEgressHeldConnectionClosed lets a call end while a request of its
// is held open: the upstream connection is closed by the time Run
// returns.
func TestEgressHeldConnectionClosed(t *testing.T) {
	inet := fixtures.NewInternet(t)
	e := newEgressExecutor(t, inet)
	res, err := e.Run(context.Background(), &sandbox.Request{
		Command: fixtures.HoldCommand,
		Session: sandbox.Session{ID: "s", Cwd: t.TempDir()},
		Policy:  egressPolicy(t),
	})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	inet.CheckHeldClosed(t, res.Stdout.Text, res.Stderr.Text, res.Egress)
}

// TestEgressRefusedOnRunsc: gVisor does not see the engine's namespace,
// so a call of network allowlist on runtime runsc is refused before
// anything is created.
func TestEgressRefusedOnRunsc(t *testing.T) {
	e := &Executor{opts: Options{Service: driver.Service{StateDir: t.TempDir()}}}
	p := egressPolicy(t)
	p.Runtime = runtimeRunsc
	_, err := e.startEgress(slog.New(slog.DiscardHandler), p, &sandbox.Call{ID: "c"}, "n", nil, nil)
	if err == nil || !strings.Contains(err.Error(), "runsc") {
		t.Errorf("startEgress(runsc) = %v, want an error naming runsc", err)
	}
}

// TestEgressCredentialsConfig: with a credential, startEgress puts the
// placeholder and the CA variables into the container's environment and
// binds the call's CA bundle read-only at egress.CABundlePath, before
// the container exists; end removes the bundle, and so does
// reapEgress for a call a crash left. The value is nowhere in the
// container's configuration.
func TestEgressCredentialsConfig(t *testing.T) {
	requireRoot(t)
	e := &Executor{opts: Options{Service: driver.Service{StateDir: t.TempDir(), Getenv: func(name string) (string, bool) {
		return fixtures.BoundSecret, name == "GH_TOKEN"
	}}}, instance: "i1"}
	p := egressPolicy(t)
	p.NetworkAllow = append(p.NetworkAllow, fixtures.BoundHostName)
	p.Credentials = []sandbox.Credential{{Name: "gh", Host: fixtures.BoundHostName, Port: 443, Header: "Authorization", Format: "Bearer {}", Variable: "GITHUB_TOKEN", ValueEnv: "GH_TOKEN"}}
	p, err := policy.Normalize(p)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &container.Config{Cmd: []string{"/bin/sh", "-c", "init"}}
	hc := &container.HostConfig{}
	ce, err := e.startEgress(slog.New(slog.DiscardHandler), p, &sandbox.Call{ID: "c1"}, "n", cfg, hc)
	if err != nil {
		t.Fatalf("startEgress(credentials) = %v", err)
	}
	var ph string
	for _, kv := range cfg.Env {
		if v, ok := strings.CutPrefix(kv, "GITHUB_TOKEN="); ok {
			ph = v
		}
	}
	if !strings.HasPrefix(ph, egress.PlaceholderPrefix+"gh-") || !slices.Contains(cfg.Env, "SSL_CERT_FILE="+egress.CABundlePath) || !slices.Contains(cfg.Env, "GIT_SSL_CAINFO="+egress.CABundlePath) {
		t.Errorf("Env = %q, want the placeholder in GITHUB_TOKEN and the CA variables", cfg.Env)
	}
	var bundle string
	for _, m := range hc.Mounts {
		if m.Target == egress.CABundlePath && m.ReadOnly {
			bundle = m.Source
		}
	}
	data, err := os.ReadFile(bundle)
	if err != nil || !bytes.Contains(data, []byte("BEGIN CERTIFICATE")) {
		t.Fatalf("the CA bundle bound at %s: %q, %v", egress.CABundlePath, bundle, err)
	}
	if strings.Contains(fmt.Sprint(cfg, hc), fixtures.BoundSecret) {
		t.Errorf("the container's configuration holds the value")
	}
	res := &sandbox.Result{}
	var runErr error
	ce.end(&res, &runErr)
	if _, err := os.Stat(bundle); !os.IsNotExist(err) {
		t.Errorf("the CA bundle is still there after end: %v", err)
	}
	// A crash between start and end: reapEgress removes what is left.
	if _, err := e.startEgress(slog.New(slog.DiscardHandler), p, &sandbox.Call{ID: "c2"}, "n", cfg, &container.HostConfig{}); err != nil {
		t.Fatal(err)
	}
	removed, err := e.reapEgress("i1", func(string) bool { return false })
	if err != nil || len(removed) != 2 {
		t.Errorf("reapEgress = %q, %v; want the FIFO and the CA bundle of c2", removed, err)
	}
	// A value that cannot be read refuses the call before anything is
	// made.
	e.opts.Getenv = func(string) (string, bool) { return "", false }
	hc = &container.HostConfig{}
	if _, err := e.startEgress(slog.New(slog.DiscardHandler), p, &sandbox.Call{ID: "c3"}, "n", cfg, hc); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), `credential "gh"`) || len(hc.Mounts) > 0 {
		t.Errorf("startEgress(unset value) = %v (mounts %v), want an invalid-argument error naming the credential and nothing bound", err, hc.Mounts)
	}
	if m, _ := filepath.Glob(filepath.Join(e.opts.StateDir, "egress", "i1", "*")); len(m) > 0 {
		t.Errorf("left behind: %v", m)
	}
}

// TestEgressCredentials runs fixtures.BoundProbes in a container of
// the engine whose policy binds a credential to fixtures.BoundHostName
// (an HTTPS server of the test, whose own CA is the policy's upstream
// CA): curl with the placeholder reaches the server, which receives the
// secret; the secret is in no environment, file, output or record.
func TestEgressCredentials(t *testing.T) {
	requireEngine(t)
	bh := fixtures.NewBoundHost(t)
	e, err := New(t.Context(), Options{
		Service: driver.Service{StateDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})), Getenv: fixtures.BoundGetenv},
		Network: egress.Network{LookupNetIP: bh.LookupNetIP, DialContext: bh.DialContext},
	})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() { e.Close() })
	if err := e.ImportRootfs(t.Context(), egressRootfsTar(t), fixtures.EgressImage, testImageEnv); err != nil {
		t.Fatalf("ImportRootfs(%q) = %v", fixtures.EgressImage, err)
	}
	p := egressPolicy(t)
	p.NetworkAllow = []string{fixtures.BoundHostName}
	p.NetworkDeny = nil
	p.Credentials = []sandbox.Credential{{Name: "bound", Host: fixtures.BoundHostName, Port: 443, Header: "Authorization", Format: "Bearer {}",
		Variable: "BOUND_TOKEN", ValueEnv: fixtures.BoundSecretEnv, UpstreamCAFile: bh.CAFile(t)}}
	if p, err = policy.Normalize(p); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := e.Run(ctx, &sandbox.Request{Command: fixtures.ProbeShell + fixtures.BoundProbes, Session: sandbox.Session{ID: "s", Cwd: t.TempDir()}, Policy: p})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	bh.Check(t, res.Stdout.Text, res.Stderr.Text, res.Egress)
	if m, _ := filepath.Glob(filepath.Join(e.opts.StateDir, "egress", "*", caPrefix+"*")); len(m) > 0 {
		t.Errorf("the call's CA bundle is left behind: %v", m)
	}
}

// TestEgressConfigAndEnd checks what startEgress changes in a container's
// configuration and that end, when no container ever opened the FIFO
// (its create or start failed), returns, removes the FIFO and reports no
// error of its own.
func TestEgressConfigAndEnd(t *testing.T) {
	requireRoot(t)
	e := &Executor{opts: Options{Service: driver.Service{StateDir: t.TempDir()}}, instance: "i1"}
	call := &sandbox.Call{ID: "c1", Env: []string{"A=1", "HTTP_PROXY=http://elsewhere:1"}}
	cfg := &container.Config{Cmd: []string{"/bin/sh", "-c", "init", "sh", "cmd"}}
	hc := &container.HostConfig{}
	ce, err := e.startEgress(slog.New(slog.DiscardHandler), egressPolicy(t), call, "n", cfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/bin/sh", "-c", readyScript, "sh", "/bin/sh", "-c", "init", "sh", "cmd"}; !slices.Equal(cfg.Cmd, want) {
		t.Errorf("Cmd = %q, want %q", cfg.Cmd, want)
	}
	if !slices.Contains(cfg.Env, "HTTP_PROXY="+egress.ProxyURL) || !slices.Contains(cfg.Env, "ALL_PROXY="+egress.SOCKSURL) || slices.Contains(cfg.Env, "HTTP_PROXY=http://elsewhere:1") {
		t.Errorf("Env = %q, want the proxy variables of egress.ProxyEnv only", cfg.Env)
	}
	var targets []string
	for _, m := range hc.Mounts {
		targets = append(targets, m.Target)
		if !m.ReadOnly {
			t.Errorf("mount %s is writable", m.Target)
		}
	}
	if !slices.Equal(targets, []string{readyPath, "/etc/resolv.conf"}) {
		t.Errorf("mounts %q, want the FIFO and resolv.conf", targets)
	}
	if fi, err := os.Stat(filepath.Dir(ce.fifo)); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o700 {
		t.Errorf("the FIFO's directory has mode %v, want 0700, so that no other host user opens the FIFO", fi.Mode().Perm())
	}
	res := &sandbox.Result{}
	var runErr error
	done := make(chan struct{})
	go func() {
		ce.end(&res, &runErr)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("end did not return without a container")
	}
	if runErr != nil || res == nil {
		t.Errorf("end = %v, %v; want the result untouched", res, runErr)
	}
	if _, err := os.Stat(ce.fifo); !os.IsNotExist(err) {
		t.Errorf("the FIFO is still there after end: %v", err)
	}
}

// TestHoldsFile: holdsFile tells a process that holds a file open (a
// child with it as its stdin) from one that does not.
func TestHoldsFile(t *testing.T) {
	dir := t.TempDir()
	var files []*os.File
	for _, name := range []string{"held", "other"} {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		files = append(files, f)
	}
	held, other := files[0], files[1]
	child := exec.Command("sleep", "30")
	child.Stdin = held
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	if err := holdsFile(child.Process.Pid, held); err != nil {
		t.Errorf("holdsFile(child, held) = %v, want nil", err)
	}
	if err := holdsFile(child.Process.Pid, other); err == nil {
		t.Errorf("holdsFile(child, other) = nil, want an error")
	}
	// A parent whose child holds the file (the stub and the ready
	// script).
	parent := exec.Command("sh", "-c", "sleep 30 <"+held.Name()+"; :")
	if err := parent.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = parent.Process.Kill(); _ = parent.Wait() }()
	var err error
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err = holdsFile(parent.Process.Pid, held); err == nil {
			break
		}
	}
	if err != nil {
		t.Errorf("holdsFile(parent of a holder, held) = %v, want nil", err)
	}
	if err := holdsFile(parent.Process.Pid, other); err == nil {
		t.Errorf("holdsFile(parent, other) = nil, want an error")
	}
}

// BenchmarkEgressCall times calls of `true` with network none and with
// network allowlist, alternating in one run, and reports both medians and
// their difference: the per-call cost of egress on the engine.
func BenchmarkEgressCall(b *testing.B) {
	e := newTestExecutor(b)
	none := testPolicy(b)
	allow := none
	allow.Network, allow.NetworkAllow = policy.NetworkAllowlist, []string{"example.com"}
	allow, err := policy.Normalize(allow)
	if err != nil {
		b.Fatal(err)
	}
	run := func(p sandbox.Policy) func() error {
		return func() error {
			res, err := e.Run(context.Background(), &sandbox.Request{Command: "true", Policy: p})
			if err != nil || sandbox.ExitCode(res, nil) != 0 {
				return fmt.Errorf("Run(true) = %+v, %v", res, err)
			}
			return nil
		}
	}
	fixtures.CompareCalls(b, run(none), run(allow))
}

// egressRootfsTar is the root filesystem of fixtures.EgressImage.
func egressRootfsTar(t *testing.T) *bytes.Buffer {
	t.Helper()
	var tar bytes.Buffer
	if err := images.BusyboxWith(&tar, fixtures.EgressTools...); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but the egress test image cannot be built: %v", err)
		}
		t.Skipf("cannot build the egress test image (install busybox-static, bash and curl): %v", err)
	}
	return &tar
}

// TestReapEgressFIFOs: Reap's helper removes the egress FIFOs of an
// instance's calls that no longer run, leaves those of a running call and
// of other instances (also one whose id extends this one's with "-"),
// and removes a dead instance's emptied directory.
func TestReapEgressFIFOs(t *testing.T) {
	e := &Executor{opts: Options{Service: driver.Service{StateDir: t.TempDir()}}, instance: "i-test"}
	dir := filepath.Join(e.opts.StateDir, "egress")
	for _, name := range []string{"i-test/ready-dead", "i-test/ready-live", "i-test-2/ready-x", "i-gone/ready-y"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o711); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mkfifo(filepath.Join(dir, name), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := e.reapEgress("i-test", func(call string) bool { return call == "live" })
	if want := []string{filepath.Join(dir, "i-test", "ready-dead")}; err != nil || !slices.Equal(removed, want) {
		t.Errorf("reapEgress(own) = %q, %v; want %q", removed, err, want)
	}
	for _, name := range []string{"i-test/ready-live", "i-test-2/ready-x"} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s after reapEgress(): %v, want it kept", name, err)
		}
	}
	removed, err = e.reapEgress("i-gone", func(string) bool { return false })
	if want := []string{filepath.Join(dir, "i-gone", "ready-y")}; err != nil || !slices.Equal(removed, want) {
		t.Errorf("reapEgress(dead) = %q, %v; want %q", removed, err, want)
	}
	if _, err := os.Lstat(filepath.Join(dir, "i-gone")); !os.IsNotExist(err) {
		t.Errorf("the dead instance's FIFO directory after reapEgress(): %v, want it gone", err)
	}
	if removed, err := e.reapEgress("i-none", func(string) bool { return false }); err != nil || len(removed) != 0 {
		t.Errorf("reapEgress() of an instance without FIFOs = %q, %v; want nothing", removed, err)
	}
}
