package oci

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/pool"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
)

var runtimes = []string{RuntimeRunc, RuntimeCrun, RuntimeRunsc}

// requireRuntime skips the test unless it runs as root and the runtime's
// binary is on PATH; under CI=true it fails instead, since CI installs
// every runtime.
func requireRuntime(t testing.TB, rt string) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = fmt.Sprintf("the oci backend needs root (running as uid %d)", os.Geteuid())
	} else if _, err := exec.LookPath(rt); err != nil {
		missing = fmt.Sprintf("runtime %q is not installed: %v", rt, err)
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but %s", missing)
	}
	t.Skip(missing)
}

// testLogger sends the executor's log to the test log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// newTestExecutor returns an executor of rt on a fresh state directory,
// closed when the test ends.
func newTestExecutor(t testing.TB, rt string) *Executor {
	t.Helper()
	requireRuntime(t, rt)
	e, err := New(Options{Runtime: rt, Service: driver.Service{StateDir: testStateDir(t), Logger: testLogger(t)}})
	if err != nil {
		t.Fatalf("New(%s) = %v", rt, err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	return e
}

// testPolicy is the built-in workspace-write policy for runtime rt.
func testPolicy(t testing.TB, rt string) sandbox.Policy {
	t.Helper()
	p, ok := policy.Builtin(policy.WorkspaceWrite)
	if !ok {
		t.Fatalf("policy.Builtin(%q) not found", policy.WorkspaceWrite)
	}
	p.Backend, p.Runtime = "oci", sandbox.Runtime(rt)
	return p
}

// leftovers lists everything of e still on the host: containers in its
// runtime root, bundles, mounts below its state directory, and cgroup
// directories of its instance in every hierarchy.
func leftovers(t testing.TB, e *Executor) []string {
	t.Helper()
	var out []string
	cs, err := e.rt.list(context.Background())
	if err != nil {
		out = append(out, "runtime list: "+err.Error())
	}
	for _, c := range cs {
		out = append(out, fmt.Sprintf("container %s (%s)", c.ID, c.Status))
	}
	entries, _ := os.ReadDir(e.rt.root)
	for _, ent := range entries {
		out = append(out, "runtime state "+filepath.Join(e.rt.root, ent.Name()))
	}
	entries, _ = os.ReadDir(e.bundlesDir())
	for _, ent := range entries {
		out = append(out, "bundle "+filepath.Join(e.bundlesDir(), ent.Name()))
	}
	mps, err := mountsUnder(e.opts.StateDir)
	if err != nil {
		out = append(out, "mountinfo: "+err.Error())
	}
	for _, m := range mps {
		out = append(out, "mount "+m)
	}
	for _, d := range e.layout.dirsFor("/" + cgroupParent + "/" + e.instance) {
		children, _ := os.ReadDir(d)
		for _, c := range children {
			if c.IsDir() {
				out = append(out, "cgroup "+filepath.Join(d, c.Name()))
			}
		}
	}
	return out
}

// hostImageEnv is the environment of the host image.
func hostImageEnv(t testing.TB) []string {
	t.Helper()
	img, err := images.Host(t.TempDir(), 0, 0)
	if err != nil {
		t.Fatalf("images.Host = %v", err)
	}
	return img.Env
}

// TestConformance runs the sandboxtest suite on every runtime, unchanged.
func TestConformance(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			requireRuntime(t, rt)
			var e *Executor
			sandboxtest.Run(t, sandboxtest.Subject{
				New: func(t *testing.T) sandbox.Executor {
					requireRuntime(t, rt)
					var err error
					e, err = New(Options{Runtime: rt, Service: driver.Service{StateDir: testStateDir(t), Logger: testLogger(t), Detector: calls.Detector{}}})
					if err != nil {
						t.Fatalf("New(%s) = %v", rt, err)
					}
					return e
				},
				Policy:    testPolicy(t, rt),
				ImageEnv:  hostImageEnv(t),
				Leftovers: func(t *testing.T) []string { return leftovers(t, e) },
				Isolated:  true,
				// gVisor serves system calls from its own kernel.
				OwnKernel: rt == RuntimeRunsc,
			})
		})
	}
}

// hitCounter counts a pool's hits.
type hitCounter struct{ hits, misses atomic.Int64 }

func (h *hitCounter) Took(_ string, hit bool, _ time.Duration) {
	if hit {
		h.hits.Add(1)
	} else {
		h.misses.Add(1)
	}
}
func (*hitCounter) Prepared(string, time.Duration, error) {}
func (*hitCounter) Destroyed(string, pool.Reason, error)  {}

// TestConformancePooled runs the sandboxtest suite, unchanged, on the
// runtimes with a warm pool, the pool on: calls of one session and
// policy take containers prepared by their predecessors. Leftovers are
// counted once the pool is drained (its prepared containers destroyed,
// its background teardowns finished); the pool must have served calls.
func TestConformancePooled(t *testing.T) {
	for _, rt := range stubRuntimes {
		t.Run(rt, func(t *testing.T) {
			requireRuntime(t, rt)
			var e *Executor
			counter := &hitCounter{}
			sandboxtest.Run(t, sandboxtest.Subject{
				New: func(t *testing.T) sandbox.Executor {
					requireRuntime(t, rt)
					var err error
					e, err = New(Options{Runtime: rt, Service: driver.Service{StateDir: testStateDir(t), Logger: testLogger(t), Detector: calls.Detector{}},
						Pool: &pool.Options{Observer: counter}})
					if err != nil {
						t.Fatalf("New(%s) = %v", rt, err)
					}
					return e
				},
				Policy:   testPolicy(t, rt),
				ImageEnv: hostImageEnv(t),
				Leftovers: func(t *testing.T) []string {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					if err := e.warm.pool.Drain(ctx); err != nil {
						t.Errorf("draining the pool: %v", err)
					}
					return leftovers(t, e)
				},
				Isolated: true,
			})
			t.Logf("pool: %d hits, %d misses", counter.hits.Load(), counter.misses.Load())
			if counter.hits.Load() == 0 {
				t.Error("no call of the suite came from the pool: the pooled run tested nothing more than TestConformance")
			}
		})
	}
}

// testStateDir is a fresh state directory whose ancestors others may
// search (t.TempDir's parent is 0700), as New requires for runc and crun,
// whose containers run in user namespaces.
func testStateDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	for _, p := range []string{filepath.Dir(d), d} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	return d
}
