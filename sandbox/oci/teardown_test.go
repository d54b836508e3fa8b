package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// callSteps are the steps of a call at which a failure is injected.
var callSteps = []string{"bundle", "rootfs", "config", "start", "started"}

// waitForPidFile waits until the runtime has written the pid file of the
// executor's only call, i.e. until its container runs.
func waitForPidFile(t *testing.T, e *Executor) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if m, _ := filepath.Glob(filepath.Join(e.bundlesDir(), "*", bundlePid)); len(m) == 1 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Errorf("the container did not start within 30 s")
}

// TestTeardownAfterInjectedFailure fails a call at each step, and panics
// in one, and checks that the call's error is an internal one and that
// nothing of it is left: no container, bundle, mount, cgroup or process.
func TestTeardownAfterInjectedFailure(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			e := newTestExecutor(t, rt)
			// The workspace is root's: its call stages id-mapped
			// mounts, and every call staging mounts of its other
			// binds, which every later failure must remove.
			steps := append(callSteps, "panic", "idmap", "binds")
			if rt == RuntimeRunsc {
				steps = append(steps, "gofer")
			}
			for _, step := range steps {
				t.Run(step, func(t *testing.T) {
					marker := fmt.Sprintf("%d%d", 7000000+len(step), os.Getpid())
					ws := t.TempDir()
					req := &sandbox.Request{
						Command: "sleep " + marker,
						Session: sandbox.Session{ID: "s", Cwd: ws, TranscriptDir: filepath.Join(t.TempDir(), "tr")},
						Policy:  testPolicy(t, rt),
					}
					injected := errors.New("injected")
					e.inject = func(s string) error {
						if s == "started" && (step == "started" || step == "panic") {
							// Fail only once the container really runs.
							waitForPidFile(t, e)
						}
						if step == "panic" && s == "started" {
							panic("injected panic")
						}
						if s == step {
							return injected
						}
						return nil
					}
					defer func() { e.inject = nil }()
					var err error
					func() {
						defer func() {
							if r := recover(); r != nil && step != "panic" {
								t.Errorf("Run panicked: %v", r)
							}
						}()
						_, err = e.Run(context.Background(), req)
					}()
					if step != "panic" && (!errors.Is(err, injected) || !errors.Is(err, sandbox.ErrInternal)) {
						t.Errorf("Run with a failure at %q = %v, want the injected error as ErrInternal", step, err)
					}
					if left := leftovers(t, e); len(left) > 0 {
						t.Errorf("after a failure at %q, left behind:\n  %s", step, strings.Join(left, "\n  "))
					}
					if left := fixtures.HostProcsWith(marker); len(left) > 0 {
						t.Errorf("after a failure at %q, processes survive:\n  %s", step, strings.Join(left, "\n  "))
					}
				})
			}
		})
	}
}
