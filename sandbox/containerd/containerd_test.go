// The daemon tests need root and a running containerd, whose socket
// DSH_SANDBOX_TEST_CONTAINERD names: eval "$(scripts/daemons.sh start
// containerd)"; go test ./sandbox/containerd. Without them they skip,
// saying what is missing; under CI=true they fail instead.

package containerd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
)

// testImage is the busybox image the tests import into the namespace.
const testImage = "dsh-sandbox-test-busybox:latest"

// testImageEnv is its environment.
var testImageEnv = []string{"PATH=" + images.DefaultPath}

// testNamespace keeps the tests' objects apart from a service's.
const testNamespace = "dsh-sandbox-test"

// testAddress returns the daemon socket the tests use
// (DSH_SANDBOX_TEST_CONTAINERD, set by scripts/daemons.sh), skipping the
// test unless it runs as root and the daemon answers; under CI=true it
// fails instead.
func testAddress(t testing.TB) string {
	t.Helper()
	addr := os.Getenv("DSH_SANDBOX_TEST_CONTAINERD")
	missing := ""
	switch {
	case os.Geteuid() != 0:
		missing = fmt.Sprintf("the containerd backend tests need root (running as uid %d)", os.Geteuid())
	case addr == "":
		missing = "DSH_SANDBOX_TEST_CONTAINERD is not set (eval \"$(scripts/daemons.sh start containerd)\")"
	default:
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		e, err := New(ctx, Options{Address: addr, Service: driver.Service{StateDir: t.TempDir()}, Namespace: testNamespace})
		cancel()
		if err != nil {
			missing = fmt.Sprintf("no containerd answers on %s: %v", addr, err)
		} else {
			e.Close()
		}
	}
	if missing == "" {
		return addr
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but %s", missing)
	}
	t.Skip(missing)
	return ""
}

// testStateDir is a fresh state directory whose ancestors others may
// search (t.TempDir's parent is 0700), as a call in a user namespace
// needs: its mapped root walks through them to the call's rootfs.
// New makes the state directory itself 0711.
func testStateDir(t testing.TB) string {
	t.Helper()
	d := t.TempDir()
	if err := os.Chmod(filepath.Dir(d), 0o711); err != nil {
		t.Fatal(err)
	}
	return d
}

// newTestExecutor returns an executor on a fresh state directory with the
// busybox test image imported, closed when the test ends.
func newTestExecutor(t testing.TB) *Executor {
	t.Helper()
	addr := testAddress(t)
	e, err := New(t.Context(), Options{Address: addr, Namespace: testNamespace, Service: driver.Service{StateDir: testStateDir(t), Detector: calls.Detector{}, Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))}})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})
	importTestImage(t, e)
	return e
}

// importTestImage imports the test image into e's namespace: busybox
// plus the host's bash, so that calls run under `bash -c` as they do on
// the host image (the conformance suite relies on bash semantics, e.g. a
// failed redirection of `:` does not end the shell).
func importTestImage(t testing.TB, e *Executor) {
	t.Helper()
	var tar bytes.Buffer
	if err := images.BusyboxWith(&tar, "bash"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but the busybox test image cannot be built: %v", err)
		}
		t.Skipf("cannot build the busybox test image (install busybox-static and bash): %v", err)
	}
	if err := e.ImportRootfs(t.Context(), &tar, testImage, testImageEnv); err != nil {
		t.Fatalf("ImportRootfs(%q) = %v", testImage, err)
	}
}

// testPolicy is the built-in workspace-write policy for the backend.
func testPolicy(t testing.TB) sandbox.Policy {
	t.Helper()
	p, ok := policy.Builtin(policy.WorkspaceWrite)
	if !ok {
		t.Fatalf("policy.Builtin(%q) not found", policy.WorkspaceWrite)
	}
	p.Backend, p.Image = Backend, testImage
	return p
}

// leftovers lists the containers and snapshots of e's instance.
func leftovers(t testing.TB, e *Executor) []string {
	t.Helper()
	var out []string
	ids, err := e.Containers(context.Background())
	if err != nil {
		out = append(out, "list containers: "+err.Error())
	}
	for _, id := range ids {
		out = append(out, "container "+id)
	}
	keys, err := e.Snapshots(context.Background())
	if err != nil {
		out = append(out, "list snapshots: "+err.Error())
	}
	for _, k := range keys {
		out = append(out, "snapshot "+k)
	}
	// Call directories of user-namespaced calls, and anything mounted
	// below the state directory (their rootfs and staging mounts).
	calls, err := os.ReadDir(filepath.Join(e.opts.StateDir, idmapDir, e.instance))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		out = append(out, "list call directories: "+err.Error())
	}
	for _, c := range calls {
		out = append(out, "call directory "+c.Name())
	}
	out = append(out, mountsBelow(t, e.opts.StateDir)...)
	// Call cgroups: the instance's own directory stays until Close.
	for _, d := range cgroupDirs("/" + cgroupParent + "/" + e.instance) {
		ents, _ := os.ReadDir(d)
		for _, ent := range ents {
			if ent.IsDir() {
				out = append(out, "cgroup "+filepath.Join(d, ent.Name()))
			}
		}
	}
	return out
}

// mountsBelow lists the mount points below dir in this process's mount
// namespace (the daemon's and its shims').
func mountsBelow(t testing.TB, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return []string{"read mountinfo: " + err.Error()}
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, "mount "+f[4])
		}
	}
	return out
}

// TestConformance runs the sandboxtest suite on the daemon, unchanged.
func TestConformance(t *testing.T) {
	testAddress(t)
	conformance(t, testImage, testImageEnv)
}

// conformance runs the sandboxtest suite, unchanged, on image, whose
// environment is env.
func conformance(t *testing.T, image string, env []string) {
	p := testPolicy(t)
	p.Image = image
	var e *Executor
	sandboxtest.Run(t, sandboxtest.Subject{
		New: func(t *testing.T) sandbox.Executor {
			e = newTestExecutor(t)
			return e
		},
		Policy:    p,
		ImageEnv:  env,
		Leftovers: func(t *testing.T) []string { return leftovers(t, e) },
		Isolated:  true,
	})
}
