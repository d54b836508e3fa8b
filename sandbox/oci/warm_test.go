package oci

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/pool"
)

// newPooledExecutor is newTestExecutor with the warm pool on.
func newPooledExecutor(t *testing.T, rt string, opts pool.Options) *Executor {
	t.Helper()
	requireRuntime(t, rt)
	e, err := New(Options{Runtime: rt, Service: driver.Service{StateDir: testStateDir(t), Logger: testLogger(t)}, Pool: &opts})
	if err != nil {
		t.Fatalf("New(%s) = %v", rt, err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// waitReady waits until e's pool holds n ready slots.
func waitReady(t *testing.T, e *Executor, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for e.warm.pool.Size().Ready != n {
		if time.Now().After(deadline) {
			t.Fatalf("pool size = %+v, want %d ready", e.warm.pool.Size(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestWarmPool: a session's second call takes the slot its first call
// had prepared, with its own command line, environment and stdin bound
// late; another session's call never takes it; each slot runs one call;
// after Close nothing is left.
func TestWarmPool(t *testing.T) {
	for _, rt := range stubRuntimes {
		t.Run(rt, func(t *testing.T) {
			e := newPooledExecutor(t, rt, pool.Options{})
			ws := t.TempDir()
			req := func(session, cmd, env string) *sandbox.Request {
				return &sandbox.Request{
					Command: cmd,
					Env:     []string{"CALL_VALUE=" + env},
					Stdin:   []byte("in-" + env),
					Session: sandbox.Session{ID: session, Cwd: ws},
					Policy:  testPolicy(t, rt),
				}
			}
			ids := map[string]bool{}
			for i, c := range []struct{ session, env, pool string }{
				{"s1", "one", sandbox.PoolMiss},
				{"s1", "two", sandbox.PoolHit},
				{"s1", "three", sandbox.PoolHit},
				{"s2", "four", sandbox.PoolMiss},
			} {
				if i > 0 && c.pool == sandbox.PoolHit {
					waitReady(t, e, 1)
				}
				res, err := e.Run(context.Background(), req(c.session, `echo "$CALL_VALUE $(cat) $PWD"`, c.env))
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				if want := c.env + " in-" + c.env + " " + ws + "\n"; res.Stdout.Text != want {
					t.Errorf("call %d stdout = %q, want %q", i, res.Stdout.Text, want)
				}
				if res.Timings.Pool != c.pool {
					t.Errorf("call %d (session %s): pool = %q, want %q", i, c.session, res.Timings.Pool, c.pool)
				}
				if ids[res.Sandbox.ContainerID] {
					t.Errorf("call %d ran in container %s, which ran a call already", i, res.Sandbox.ContainerID)
				}
				ids[res.Sandbox.ContainerID] = true
			}
			// The pool's Close (part of the executor's) destroys the
			// ready slot and waits for the teardowns of the calls.
			if err := e.warm.pool.Close(context.Background()); err != nil {
				t.Errorf("pool Close() = %v", err)
			}
			if left := leftovers(t, e); len(left) > 0 {
				t.Errorf("left behind after the pool's Close: %q", left)
			}
		})
	}
}

// TestWarmSlotExpires: a slot unused for the pool's TTL, of a session
// idle since, is destroyed and not replaced; nothing is left of it.
func TestWarmSlotExpires(t *testing.T) {
	e := newPooledExecutor(t, RuntimeRunc, pool.Options{TTL: 500 * time.Millisecond, Idle: 100 * time.Millisecond})
	req := &sandbox.Request{Command: "true", Session: sandbox.Session{ID: "s", Cwd: t.TempDir()}, Policy: testPolicy(t, RuntimeRunc)}
	if _, err := e.Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	waitReady(t, e, 1)
	if left := leftovers(t, e); len(left) == 0 {
		t.Fatal("a ready slot leaves nothing to see: the check below would prove nothing")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		left := leftovers(t, e)
		if len(left) == 0 && e.warm.pool.Size().Ready == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("20 s after its TTL the expired slot remains: %s", strings.Join(left, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWarmSessionsRace: two sessions' calls race for slots; every call
// sees its own session's workspace and its own environment, no container
// runs two calls, and nothing is left after the pool's Close.
func TestWarmSessionsRace(t *testing.T) {
	e := newPooledExecutor(t, RuntimeRunc, pool.Options{PerKey: 2})
	ws := map[string]string{"a": t.TempDir(), "b": t.TempDir()}
	type out struct {
		session, want string
		res           *sandbox.Result
		err           error
	}
	results := make(chan out, 16)
	var wg sync.WaitGroup
	for _, session := range []string{"a", "b"} {
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range 3 {
					v := fmt.Sprintf("%s-%d-%d", session, i, j)
					res, err := e.Run(context.Background(), &sandbox.Request{
						Command: `echo "$V $PWD"`,
						Env:     []string{"V=" + v},
						Session: sandbox.Session{ID: session, Cwd: ws[session]},
						Policy:  testPolicy(t, RuntimeRunc),
					})
					results <- out{session, v + " " + ws[session] + "\n", res, err}
				}
			}()
		}
	}
	wg.Wait()
	close(results)
	ids := map[string]bool{}
	hits := 0
	for o := range results {
		if o.err != nil {
			t.Errorf("session %s: %v", o.session, o.err)
			continue
		}
		if o.res.Stdout.Text != o.want {
			t.Errorf("session %s: stdout %q, want %q", o.session, o.res.Stdout.Text, o.want)
		}
		if ids[o.res.Sandbox.ContainerID] {
			t.Errorf("container %s ran two calls", o.res.Sandbox.ContainerID)
		}
		ids[o.res.Sandbox.ContainerID] = true
		if o.res.Timings.Pool == sandbox.PoolHit {
			hits++
		}
	}
	t.Logf("%d of 12 calls came from the pool", hits)
	if err := e.warm.pool.Close(context.Background()); err != nil {
		t.Errorf("pool Close() = %v", err)
	}
	if left := leftovers(t, e); len(left) > 0 {
		t.Errorf("left behind after the pool's Close: %q", left)
	}
}

// TestWarmNewSession: a new session's first call takes a container
// prepared by another session's call in the same workspace, with its own
// session directory mounted at Bind — readable (its transcript, mode
// 0600, as its owner), read-only, nosuid, nodev, noexec — and nothing of
// the other session's directory visible. Session directories in the
// container's /tmp (a tmpfs) and in its root file system's skeleton are
// both covered.
func TestWarmNewSession(t *testing.T) {
	for _, rt := range stubRuntimes {
		t.Run(rt, func(t *testing.T) {
			e := newPooledExecutor(t, rt, pool.Options{})
			ws := t.TempDir()
			os.Chmod(ws, 0o777)
			// Session roots: one below /tmp, one outside it (the
			// state directory's parent is not below /tmp in CI either,
			// but a directory of our own under /var/tmp is certain).
			varRoot, err := os.MkdirTemp("/var/tmp", "dsh-sandbox-late-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(varRoot) })
			for _, root := range []string{t.TempDir(), varRoot} {
				dir := func(id string) string {
					d := filepath.Join(root, "sessions", id)
					if err := os.MkdirAll(d, 0o700); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(d, "transcript.jsonl"), []byte("line of "+id+"\n"), 0o600); err != nil {
						t.Fatal(err)
					}
					return d
				}
				a, b := dir("session-a"), dir("session-b")
				req := func(id, td, cmd string) *sandbox.Request {
					return &sandbox.Request{
						Command: cmd,
						Session: sandbox.Session{ID: id, Cwd: ws, TranscriptDir: td},
						Policy:  testPolicy(t, rt),
					}
				}
				res, err := e.Run(context.Background(), req("session-a", a, "cat "+a+"/transcript.jsonl"))
				if err != nil || res.Stdout.Text != "line of session-a\n" {
					t.Fatalf("session a's call = %+v, %v", res, err)
				}
				waitReady(t, e, 1)
				script := strings.Join([]string{
					"cat " + b + "/transcript.jsonl",
					"ls " + a + " >/dev/null 2>&1 && echo SEES-A",
					"touch " + b + "/x 2>/dev/null && echo WROTE",
					"awk '$5 == \"" + b + "\" {print $6}' /proc/self/mountinfo",
				}, "; ")
				res, err = e.Run(context.Background(), req("session-b", b, script))
				if err != nil {
					t.Fatalf("session b's first call: %v", err)
				}
				if res.Timings.Pool != sandbox.PoolHit {
					t.Errorf("session b's first call: pool = %q, want a container prepared by session a's call", res.Timings.Pool)
				}
				lines := strings.Split(strings.TrimSpace(res.Stdout.Text), "\n")
				if len(lines) != 2 || lines[0] != "line of session-b" {
					t.Fatalf("session b's first call printed %q (stderr %q); want its transcript line and its mount's options", res.Stdout.Text, res.Stderr.Text)
				}
				opts := strings.Split(lines[1], ",")
				for _, o := range []string{"ro", "nosuid", "nodev", "noexec"} {
					if !slices.Contains(opts, o) {
						t.Errorf("session b's directory is mounted %q, want %s", lines[1], o)
					}
				}
				if _, err := os.Stat(filepath.Join(b, "x")); err == nil {
					t.Error("the call wrote into its session directory")
				}
				if err := e.warm.pool.Drain(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if left := leftovers(t, e); len(left) > 0 {
				t.Errorf("left behind after the pool was drained: %q", left)
			}
		})
	}
}

// TestStubOutsideTaskLimit: the stub's threads do not count against the
// call's task limit. Under limits.pids 16 a shell starting up to 40
// background sleeps gets 15 of them (the shell is the 16th task), or up
// to three fewer when the stub's runtime started threads after the call
// was bound (one or two seen, on a loaded machine); before, the stub's 7
// or 8 threads left it 7.
func TestStubOutsideTaskLimit(t *testing.T) {
	for _, rt := range []string{RuntimeRunc, RuntimeCrun} {
		t.Run(rt, func(t *testing.T) {
			e := newTestExecutor(t, rt)
			p := testPolicy(t, rt)
			p.Limits.Pids = 16
			res, err := e.Run(context.Background(), &sandbox.Request{
				// dash, which does not retry a refused fork as bash does.
				Argv:      []string{"/bin/sh", "-c", `i=0; while [ $i -lt 40 ] && { sleep 30 & } 2>/dev/null; do echo started; i=$((i+1)); done; kill $(jobs -p)`},
				Session:   sandbox.Session{ID: "s", Cwd: t.TempDir()},
				Policy:    p,
				TimeoutMs: 20000,
			})
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			if n := strings.Count(res.Stdout.Text, "started"); n < 12 || n > 15 {
				t.Errorf("%d background sleeps under limits.pids 16, want 12–15 (stderr %q)", n, res.Stderr.Text)
			}
		})
	}
}
