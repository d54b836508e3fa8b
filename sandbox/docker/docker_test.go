// The Docker engine tests need root and a running dockerd; without them
// they skip, except under CI=true, where they fail. Start one with:
// eval "$(scripts/daemons.sh start)"; go test ./sandbox/docker

package docker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
)

// testImage is the busybox image the tests import into the engine.
const testImage = "dsh-sandbox-test-busybox:latest"

// testImageEnv is its environment.
var testImageEnv = []string{"PATH=" + images.DefaultPath}

// requireEngine skips the test unless it runs as root and a Docker
// engine answers; under CI=true it fails instead (scripts/test.sh starts
// one with scripts/daemons.sh).
func requireEngine(t testing.TB) {
	t.Helper()
	missing := ""
	if os.Geteuid() != 0 {
		missing = fmt.Sprintf("the docker backend tests need root (running as uid %d)", os.Geteuid())
	} else if cli, err := newClient(""); err != nil {
		missing = err.Error()
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := cli.Ping(ctx)
		cancel()
		cli.Close()
		if err != nil {
			missing = fmt.Sprintf("no Docker engine answers (start one with scripts/daemons.sh start): %v", err)
		}
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but %s", missing)
	}
	t.Skip(missing)
}

// newTestExecutor returns an executor on a fresh state directory with the
// busybox test image imported, closed when the test ends.
func newTestExecutor(t testing.TB) *Executor {
	t.Helper()
	requireEngine(t)
	e, err := New(t.Context(), Options{Service: driver.Service{StateDir: t.TempDir(), Detector: calls.Detector{}, Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))}})
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

// testImageMu guards testImageReady, which is true once this test
// process has imported the test image: the tests share one import, which
// keeps them fast and replaces the image of an earlier run only once.
var (
	testImageMu    sync.Mutex
	testImageReady bool
)

// importTestImage imports the test image through e unless this process
// already did: the busybox root filesystem plus the host's bash and its
// libraries, since calls run under `bash -c` as on the host image (the
// conformance suite relies on bash semantics, e.g. a failed redirection
// of `:` does not end the shell).
func importTestImage(t testing.TB, e *Executor) {
	t.Helper()
	testImageMu.Lock()
	defer testImageMu.Unlock()
	if testImageReady {
		return
	}
	var tar bytes.Buffer
	if err := testRootfsTar(&tar); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but the busybox test image cannot be built: %v", err)
		}
		t.Skipf("cannot build the busybox test image (install busybox-static and bash): %v", err)
	}
	if err := e.ImportRootfs(t.Context(), &tar, testImage, testImageEnv); err != nil {
		t.Fatalf("ImportRootfs(%q) = %v", testImage, err)
	}
	testImageReady = true
}

// testRootfsTar writes the test image's root filesystem to w.
func testRootfsTar(w io.Writer) error {
	return images.BusyboxWith(w, "bash")
}

// testPolicy is the built-in workspace-write policy for the engine.
func testPolicy(t testing.TB) sandbox.Policy {
	t.Helper()
	p, ok := policy.Builtin(policy.WorkspaceWrite)
	if !ok {
		t.Fatalf("policy.Builtin(%q) not found", policy.WorkspaceWrite)
	}
	p.Backend, p.Image = Backend, testImage
	return p
}

// leftovers lists the engine's containers of e's instance.
func leftovers(t testing.TB, e *Executor) []string {
	t.Helper()
	ids, err := e.Containers(context.Background())
	if err != nil {
		return []string{"list containers: " + err.Error()}
	}
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = "container " + id
	}
	// Staging mounts of calls that returned (see binds.go).
	calls, _ := os.ReadDir(filepath.Join(e.bindsDir(), e.instance))
	for _, c := range calls {
		out = append(out, "staging mounts "+filepath.Join(e.bindsDir(), e.instance, c.Name()))
	}
	return out
}

// TestConformance runs the sandboxtest suite on the engine, unchanged.
func TestConformance(t *testing.T) {
	requireEngine(t)
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

// TestSuspiciousCase lists which ends of a call make Run ask whether the
// engine went away.
func TestSuspiciousCase(t *testing.T) {
	broken := errors.New("broken")
	for _, tc := range []struct {
		status           int64
		waitErr, copyErr error
		want             bool
	}{
		{0, nil, nil, false},
		{1, nil, nil, false},
		{127, nil, nil, false},
		{128, nil, nil, true},
		{137, nil, nil, true}, // SIGKILL: what an engine that stops leaves
		{143, nil, nil, true},
		{255, nil, nil, true},
		{-1, nil, nil, true},
		{0, broken, nil, true},
		{0, nil, broken, true},
	} {
		if got := suspicious(tc.status, tc.waitErr, tc.copyErr); got != tc.want {
			t.Errorf("suspicious(%d, %v, %v) = %v, want %v", tc.status, tc.waitErr, tc.copyErr, got, tc.want)
		}
	}
}
