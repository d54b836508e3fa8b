package docker

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
)

// stopWait bounds how long the test waits for the engine to stop or to
// answer again; it is a safety net, not an assertion on speed.
const stopWait = 90 * time.Second

// enginePID returns the PID of the process serving the engine's Unix
// socket, from the socket's peer credentials.
func enginePID(t *testing.T, e *Executor) int {
	t.Helper()
	host := e.cli.DaemonHost()
	path, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		t.Skipf("engine at %q is not on a Unix socket; cannot find its process", host)
	}
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatalf("dial %s: %v", path, err)
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		t.Fatalf("SO_PEERCRED on %s: %v %v", path, err, cerr)
	}
	return int(cred.Pid)
}

// startEngine starts the engine again with scripts/daemons.sh, which
// starts dockerd only when none answers and reuses its other daemon.
func startEngine(t *testing.T, script string) {
	t.Helper()
	out, err := exec.Command("bash", script, "start", "docker").CombinedOutput()
	if err != nil {
		t.Fatalf("%s start: %v\n%s", script, err, out)
	}
}

// stopEngine sends sig to the engine and waits for it to exit. SIGTERM
// is what `systemctl stop docker` and scripts/daemons.sh stop send: the
// engine stops its containers on the way down. SIGKILL is a crash: the
// containers outlive it.
func stopEngine(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	if err := syscall.Kill(pid, sig); err != nil {
		t.Fatalf("kill(%d, %v) = %v", pid, sig, err)
	}
	for deadline := time.Now().Add(stopWait); syscall.Kill(pid, 0) == nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the engine (pid %d) did not exit within %v of %v", pid, stopWait, sig)
		}
	}
}

// TestRunEngineStopsUnavailable stops the engine while a call runs: the
// call must fail as unavailable (exit code 125), not report the SIGKILL
// the engine gave the container on its way down; a call while the engine
// is down fails the same way; once the engine is back, Reap leaves no
// container of the executor behind.
func TestRunEngineStopsUnavailable(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sandbox.SignalName(sig), func(t *testing.T) { testRunEngineStops(t, sig) })
	}
}

func testRunEngineStops(t *testing.T, sig syscall.Signal) {
	e := newTestExecutor(t)
	pid := enginePID(t, e)
	script := fixtures.DaemonsScript(t)
	restarted := false
	t.Cleanup(func() {
		if !restarted {
			startEngine(t, script)
		}
	})

	ws := t.TempDir()
	req := &sandbox.Request{
		Command:   "echo started; sleep 300",
		TimeoutMs: 600_000,
		Session:   sandbox.Session{Cwd: ws},
		Policy:    testPolicy(t),
		CallID:    "fault-" + sandbox.NewInstanceID(),
	}
	req.Policy.Limits.MaxTimeoutMs = 600_000
	done := sandboxtest.StartRun(context.Background(), t, e, req)

	t0 := time.Now()
	stopEngine(t, pid, sig)
	o := <-done
	t.Logf("Run(%q) returned %v after %v: %v", req.Command, sig, time.Since(t0).Round(time.Millisecond), o.Err)
	if !errors.Is(o.Err, sandbox.ErrUnavailable) {
		t.Errorf("Run(%q) with the engine stopped mid-call: err = %v, want one wrapping %v", req.Command, o.Err, sandbox.ErrUnavailable)
	}
	if o.Result != nil {
		t.Errorf("Run(%q) with the engine stopped mid-call: res = %+v, want nil (the outcome is unknown)", req.Command, *o.Result)
	}
	if got := sandbox.ExitCode(o.Result, o.Err); got != 125 {
		t.Errorf("ExitCode(Run(%q) with the engine stopped mid-call) = %d, want 125", req.Command, got)
	}

	down := &sandbox.Request{Command: "echo ran", Session: sandbox.Session{Cwd: ws}, Policy: testPolicy(t)}
	res, err := e.Run(context.Background(), down)
	if !errors.Is(err, sandbox.ErrUnavailable) || res != nil {
		t.Errorf("Run(%q) with the engine down = %v, %v; want nil, an error wrapping %v", down.Command, res, err, sandbox.ErrUnavailable)
	}

	startEngine(t, script)
	restarted = true
	rep, err := e.Reap(context.Background())
	if err != nil {
		t.Errorf("Reap() after the restart = %v", err)
	}
	t.Logf("Reap() after the restart removed %v", rep.Containers)
	if left := leftovers(t, e); len(left) != 0 {
		t.Errorf("after the restart and Reap: %v, want none", left)
	}
	if _, err := e.cli.ContainerInspect(context.Background(), containerName(req.CallID)); !isNotFound(err) {
		t.Errorf("ContainerInspect(%q) after Reap: err = %v, want not found", containerName(req.CallID), err)
	}

	// The executor serves calls again.
	res, err = e.Run(t.Context(), down)
	if err != nil || res == nil || res.ExitCode == nil || *res.ExitCode != 0 || res.Stdout.Text != "ran\n" {
		t.Errorf("Run(%q) after the restart = %+v, %v; want exit 0 and %q", down.Command, res, err, "ran\n")
	}
}

// TestRunCallIDTakenByOtherExecutor runs a call whose id another
// executor's running call already uses: the engine refuses the container
// name, and the call must fail as invalid without removing the other
// call's container.
func TestRunCallIDTakenByOtherExecutor(t *testing.T) {
	first := newTestExecutor(t)
	second, err := New(t.Context(), Options{StateDir: t.TempDir()})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	defer second.Close()

	ws := t.TempDir()
	req := &sandbox.Request{
		Command: "echo started; sleep 300",
		Session: sandbox.Session{Cwd: ws},
		Policy:  testPolicy(t),
		CallID:  "shared-" + sandbox.NewInstanceID(),
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := sandboxtest.StartRun(ctx, t, first, req)

	dup := &sandbox.Request{Command: "echo dup", Session: sandbox.Session{Cwd: ws}, Policy: testPolicy(t), CallID: req.CallID}
	res, err := second.Run(t.Context(), dup)
	if !errors.Is(err, sandbox.ErrInvalid) || res != nil {
		t.Errorf("Run(callId %q) on a second executor while the first runs it = %+v, %v; want nil, an error wrapping %v", dup.CallID, res, err, sandbox.ErrInvalid)
	}

	cancel()
	o := <-done
	if o.Err != nil || o.Result == nil || !o.Result.Aborted {
		t.Errorf("the first Run(%q) after cancel = %+v, %v; want an aborted result (its container untouched by the second executor)", req.Command, o.Result, o.Err)
	}
	if left := leftovers(t, first); len(left) != 0 {
		t.Errorf("after both calls: %v, want none", left)
	}
}
