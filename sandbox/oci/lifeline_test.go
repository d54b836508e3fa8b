package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// stubRuntimes are the runtimes whose containers run the stub.
var stubRuntimes = []string{RuntimeRunc, RuntimeCrun}

// gone waits up to within for no host process to carry marker in its
// command line, and returns how long that took, or the survivors.
func gone(marker string, within time.Duration) (time.Duration, []string) {
	t0 := time.Now()
	for {
		left := fixtures.HostProcsWith(marker)
		if len(left) == 0 {
			return time.Since(t0), nil
		}
		if time.Since(t0) > within {
			return time.Since(t0), left
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// visible waits up to within for a host process to carry marker in its
// command line.
func visible(marker string, within time.Duration) bool {
	for t0 := time.Now(); time.Since(t0) < within; time.Sleep(5 * time.Millisecond) {
		if len(fixtures.HostProcsWith(marker)) > 0 {
			return true
		}
	}
	return false
}

// reapDead removes what a dead helper instance left on state.
func reapDead(t *testing.T, rt, state string) {
	t.Helper()
	reaper, err := New(Options{Runtime: rt, Service: driver.Service{StateDir: state, Logger: testLogger(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer reaper.Close()
	rep, err := reaper.Reap(context.Background())
	if err != nil {
		t.Errorf("Reap() = %v", err)
	}
	t.Logf("reaped after the helper: %+v", rep)
	if left := leftovers(t, reaper); len(left) > 0 {
		t.Errorf("left behind after Reap: %q", left)
	}
}

// TestLifelineKilledSupervisor: kill -9 of the process that supervises a
// running call ends the call within 2 s — the stub sees its control
// channel end and exits, and the kernel kills the pid namespace —
// without any reap.
func TestLifelineKilledSupervisor(t *testing.T) {
	for _, rt := range stubRuntimes {
		t.Run(rt, func(t *testing.T) {
			requireRuntime(t, rt)
			state := testStateDir(t)
			marker := fmt.Sprintf("%d%d", 8200000, os.Getpid())
			cmd, out := startHelper(t, rt, state, "lifeline-"+rt, marker, "", 0)
			// "started" is printed before the shell has forked the sleep.
			if !visible(marker, 10*time.Second) {
				t.Fatal("the call's sleep is not visible on the host before the kill: the check below would prove nothing")
			}
			if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			go io.Copy(io.Discard, out)
			_ = cmd.Wait()
			took, left := gone(marker, 2*time.Second)
			if len(left) > 0 {
				t.Errorf("%v after kill -9 of the supervisor, the call still runs:\n  %s", took, strings.Join(left, "\n  "))
			}
			t.Logf("the call ended %v after its supervisor was killed", took)
			reapDead(t, rt, state)
		})
	}
}

// TestLifelineFrozenSupervisor: a call whose supervisor is frozen
// (SIGSTOP) still ends at its deadline: timeout + kill grace + the
// stub's slack.
func TestLifelineFrozenSupervisor(t *testing.T) {
	for _, rt := range stubRuntimes {
		t.Run(rt, func(t *testing.T) {
			requireRuntime(t, rt)
			state := testStateDir(t)
			marker := fmt.Sprintf("%d%d", 8300000, os.Getpid())
			const timeout = 1500 * time.Millisecond
			t0 := time.Now()
			cmd, out := startHelper(t, rt, state, "frozen-"+rt, marker, "", timeout.Milliseconds())
			if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			defer func() {
				cmd.Process.Signal(syscall.SIGKILL)
				cmd.Process.Signal(syscall.SIGCONT)
				go io.Copy(io.Discard, out)
				_ = cmd.Wait()
				reapDead(t, rt, state)
			}()
			limit := timeout + sandbox.DefaultKillGrace + stubSlack
			_, left := gone(marker, limit+time.Second)
			took := time.Since(t0)
			if len(left) > 0 {
				t.Errorf("%v after the call started with a %v timeout and a frozen supervisor, it still runs:\n  %s", took, timeout, strings.Join(left, "\n  "))
			}
			t.Logf("the call ended %v after it was started (deadline %v)", took, limit)
		})
	}
}

// TestStubKilledBeforeBind: a slot whose stub is killed before its call
// is bound fails the call (nothing runs: the command's file is never
// written) and leaves nothing behind; the same call on a live slot runs.
func TestStubKilledBeforeBind(t *testing.T) {
	for _, rt := range stubRuntimes {
		t.Run(rt, func(t *testing.T) {
			e := newTestExecutor(t, rt)
			for _, kill := range []bool{true, false} {
				ws := t.TempDir()
				os.Chmod(ws, 0o777)
				req := &sandbox.Request{
					Command: "echo ran > ran",
					Session: sandbox.Session{ID: "s", Cwd: ws},
					Policy:  testPolicy(t, rt),
				}
				e.inject = func(s string) error {
					if s == "started" && kill {
						waitForPidFile(t, e)
						m, _ := filepath.Glob(filepath.Join(e.bundlesDir(), "*", bundlePid))
						data, _ := os.ReadFile(m[0])
						pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
						if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
							t.Errorf("kill the stub: %v", err)
						}
					}
					return nil
				}
				res, err := e.Run(context.Background(), req)
				e.inject = nil
				_, statErr := os.Stat(filepath.Join(ws, "ran"))
				if kill {
					if err == nil || !errors.Is(err, sandbox.ErrInternal) {
						t.Errorf("Run on a slot whose stub was killed = %+v, %v; want an internal error", res, err)
					}
					if statErr == nil {
						t.Error("the command ran although its slot's stub was dead")
					}
				} else if err != nil || res.ExitCode == nil || *res.ExitCode != 0 || statErr != nil {
					t.Errorf("Run on a live slot = %+v, %v (file: %v); want it ran", res, err, statErr)
				}
				if left := leftovers(t, e); len(left) > 0 {
					t.Errorf("left behind (stub killed: %v): %q", kill, left)
				}
			}
		})
	}
}

// TestCommandCannotReadStub: the command gets nothing of pid 1 — not its
// environment, memory or descriptors (neither where they lead nor the
// control channel itself) — and holds no descriptor beyond its stdio;
// the same reads of its own process succeed.
func TestCommandCannotReadStub(t *testing.T) {
	for _, rt := range stubRuntimes {
		t.Run(rt, func(t *testing.T) {
			e := newTestExecutor(t, rt)
			script := `for f in environ mem; do if head -c 1 /proc/$P/$f >/dev/null 2>&1; then echo "$f:read"; else echo "$f:denied"; fi; done; ` +
				`if readlink /proc/$P/fd/0 >/dev/null 2>&1 || (: </proc/$P/fd/3) 2>/dev/null; then echo "fd:read"; else echo "fd:denied"; fi; ` +
				`ls /proc/self/fd | tr '\n' ' '`
			for _, target := range []string{"1", "self"} {
				req := &sandbox.Request{
					Command: "P=" + target + "; " + script,
					Session: sandbox.Session{ID: "s", Cwd: t.TempDir()},
					Policy:  testPolicy(t, rt),
				}
				res, err := e.Run(context.Background(), req)
				if err != nil {
					t.Fatal(err)
				}
				want := "environ:denied\nmem:denied\nfd:denied\n"
				if target == "self" {
					want = "environ:read\nmem:denied\nfd:read\n" // mem of oneself at offset 0 is unmapped
				}
				got, fds, _ := strings.Cut(res.Stdout.Text, "fd:")
				got += "fd:" + fds[:strings.IndexByte(fds, '\n')+1]
				if got != want {
					t.Errorf("reads of /proc/%s = %q, want %q (stderr %q)", target, got, want, res.Stderr.Text)
				}
				if rest := fds[strings.IndexByte(fds, '\n')+1:]; rest != "0 1 2 3 " {
					t.Errorf("descriptors of the command's ls = %q, want \"0 1 2 3 \" (stdio and its own)", rest)
				}
			}
		})
	}
}

// TestCommandExitsBeforeStdin: a command that exits without reading a
// stdin larger than a pipe's buffer ends the call at once.
func TestCommandExitsBeforeStdin(t *testing.T) {
	for _, rt := range stubRuntimes {
		t.Run(rt, func(t *testing.T) {
			e := newTestExecutor(t, rt)
			req := &sandbox.Request{
				Command:   "exit 3",
				Stdin:     make([]byte, 4<<20),
				TimeoutMs: 20_000,
				Session:   sandbox.Session{ID: "s", Cwd: t.TempDir()},
				Policy:    testPolicy(t, rt),
			}
			res, err := e.Run(context.Background(), req)
			if err != nil || res.ExitCode == nil || *res.ExitCode != 3 || res.TimedOut {
				t.Errorf("Run(exit 3 with 4 MiB unread stdin) = %+v, %v; want exit 3", res, err)
			}
			if err == nil && res.Timings.Pool != "" {
				t.Errorf("pool = %q without a pool, want none", res.Timings.Pool)
			}
			if left := leftovers(t, e); len(left) > 0 {
				t.Errorf("left behind: %q", left)
			}
		})
	}
}
