package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
)

// requireRunsc skips the test unless the engine has runsc registered;
// under CI=true it fails instead (scripts/daemons.sh registers runsc when
// it starts dockerd).
func requireRunsc(t *testing.T, e *Executor) {
	t.Helper()
	have, err := e.engineRuntimes(t.Context())
	if err != nil {
		t.Fatalf("engineRuntimes() = %v", err)
	}
	if slices.Contains(have, "runsc") {
		return
	}
	msg := "the engine has no runtime runsc registered (it has " + strings.Join(have, ", ") + "); scripts/daemons.sh registers it when runsc is installed"
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but %s", msg)
	}
	t.Skip(msg)
}

// TestRunRunsc runs calls under policy.runtime runsc (gVisor): the
// command's status, the policy's identity, a read-only root, no network
// interface but lo, output streamed while the call runs, and a timeout
// that stops it. It is not the whole conformance suite: runsc is slow.
func TestRunRunsc(t *testing.T) {
	e := newTestExecutor(t)
	requireRunsc(t, e)
	p := testPolicy(t)
	p.Runtime, p.User = "runsc", "1000:1001"
	ws := t.TempDir()

	t.Run("Shape", func(t *testing.T) {
		req := &sandbox.Request{
			Command: `id -u; id -g; if touch /probe 2>/dev/null; then echo root writable; else echo root read-only; fi; ` +
				`sed -n '3,$p' /proc/net/dev | cut -d: -f1 | tr -d ' '; uname -r >&2; exit 7`,
			Session: sandbox.Session{Cwd: ws},
			Policy:  p,
		}
		res, err := e.Run(t.Context(), req)
		if err != nil {
			t.Fatalf("Run(%q) = %v", req.Command, err)
		}
		if code := sandbox.ExitCode(res, nil); code != 7 {
			t.Errorf("Run(%q) exit code = %d, want 7; stderr %q", req.Command, code, res.Stderr.Text)
		}
		if want := "1000\n1001\nroot read-only\nlo\n"; res.Stdout.Text != want {
			t.Errorf("Run(%q) stdout = %q, want %q", req.Command, res.Stdout.Text, want)
		}
		// gVisor reports a kernel of its own, not the host's.
		var host unix.Utsname
		if err := unix.Uname(&host); err != nil {
			t.Fatal(err)
		}
		if got, hostRelease := strings.TrimSpace(res.Stderr.Text), unix.ByteSliceToString(host.Release[:]); got == "" || got == hostRelease {
			t.Errorf("Run(%q) kernel release = %q, want gVisor's, not empty nor the host's %q", req.Command, got, hostRelease)
		}
		if res.Sandbox.Runtime != "runsc" {
			t.Errorf("Run(%q) Sandbox.Runtime = %q, want %q", req.Command, res.Sandbox.Runtime, "runsc")
		}
	})

	t.Run("TimeoutStreamed", func(t *testing.T) {
		req := &sandbox.Request{
			Command:   "echo started; sleep 300",
			TimeoutMs: 2000,
			Session:   sandbox.Session{Cwd: ws},
			Policy:    p,
		}
		done := sandboxtest.StartRun(context.Background(), t, e, req)
		o := <-done
		if o.Err != nil {
			t.Fatalf("Run(%q) = %v", req.Command, o.Err)
		}
		if !o.Result.TimedOut || o.Result.ExitCode != nil || o.Result.Signal == "" {
			t.Errorf("Run(%q) with a 2 s timeout = timedOut %v, exit code %v, signal %q; want timed out, killed by a signal", req.Command, o.Result.TimedOut, o.Result.ExitCode, o.Result.Signal)
		}
		if o.Result.Stdout.Text != "started\n" {
			t.Errorf("Run(%q) stdout = %q, want %q", req.Command, o.Result.Stdout.Text, "started\n")
		}
	})

	if left := leftovers(t, e); len(left) != 0 {
		t.Errorf("after the runsc calls: %v, want none", left)
	}
}

// TestRunRuntimeMissing asks for a runtime the engine lacks (a valid
// policy runtime the engine has not registered: scripts/daemons.sh
// registers runsc, not crun): the call must fail as unavailable (exit
// code 125) with a message naming policy.runtime, the runtimes the
// engine has and how to register one, and no container may be created
// or run under another runtime. A runtime no policy may name is refused
// as invalid before the engine is asked.
func TestRunRuntimeMissing(t *testing.T) {
	e := newTestExecutor(t)
	have, err := e.engineRuntimes(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var missing sandbox.Runtime
	for _, r := range sandbox.Runtimes {
		if !slices.Contains(have, string(r)) {
			missing = r
			break
		}
	}
	if missing == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but the engine registers every runtime (%q): no missing one to ask for", have)
		}
		t.Skipf("the engine registers every runtime (%q)", have)
	}
	p := testPolicy(t)
	p.Runtime = "nosuch"
	req := &sandbox.Request{Command: "echo ran", Session: sandbox.Session{Cwd: t.TempDir()}, Policy: p}
	if res, err := e.Run(t.Context(), req); !errors.Is(err, sandbox.ErrInvalid) || res != nil || !strings.Contains(err.Error(), "runtime") {
		t.Errorf("Run under runtime %q = %+v, %v; want nil, an error wrapping %v naming the runtime", p.Runtime, res, err, sandbox.ErrInvalid)
	}
	p.Runtime = missing
	req.Policy = p
	for range 2 { // the second call asks the engine again: a miss refreshes the cache
		res, err := e.Run(t.Context(), req)
		if !errors.Is(err, sandbox.ErrUnavailable) || res != nil {
			t.Fatalf("Run(%q) under runtime %q = %+v, %v; want nil, an error wrapping %v", req.Command, p.Runtime, res, err, sandbox.ErrUnavailable)
		}
		if got := sandbox.ExitCode(res, err); got != 125 {
			t.Errorf("ExitCode(Run under runtime %q) = %d, want 125", p.Runtime, got)
		}
		for _, want := range []string{fmt.Sprintf("policy.runtime %q", missing), "runc", "daemon.json", `"runtimes"`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("Run under runtime %q: error %q does not mention %q", p.Runtime, err, want)
			}
		}
	}
	if left := leftovers(t, e); len(left) != 0 {
		t.Errorf("after the refused calls: %v, want none", left)
	}
	// The default runtime still works on the same executor.
	req.Policy = testPolicy(t)
	res, err := e.Run(t.Context(), req)
	if err != nil || sandbox.ExitCode(res, nil) != 0 || res.Stdout.Text != "ran\n" {
		t.Errorf("Run(%q) under runtime %q = %+v, %v; want exit 0 and %q", req.Command, req.Policy.Runtime, res, err, "ran\n")
	}
}
