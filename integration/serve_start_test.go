//go:build integration

package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestServeStartsWithoutRuntime: serve on a host (or in a pod) without an
// OCI runtime starts when a backend of its policies is usable (here a
// local policy), warns about the others, and fails their calls as
// unavailable, naming the runtime; with no usable backend at all it
// refuses to start, saying why.
func TestServeStartsWithoutRuntime(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	// A PATH with bash (the local backend's shell) and no runtime.
	path := t.TempDir()
	if err := os.Symlink("/bin/bash", filepath.Join(path, "bash")); err != nil {
		t.Fatal(err)
	}
	noRuntime := []string{"PATH=" + path}

	r := run(t, noRuntime, append([]string{"serve"}, e.flags("")...)...)
	if r.code == 0 || !strings.Contains(r.stderr, "no backend of the service's policies is usable") || !strings.Contains(r.stderr, `runtime "runc"`) {
		t.Errorf("serve with only the built-in policies and no runtime = %d, %q; want a refusal naming runc", r.code, r.stderr)
	}

	local := trustWrite(t, filepath.Join(t.TempDir(), "loc.yaml"), "name: loc\nbackend: local\n", 0o644)
	sv := startServeEnv(t, e, filepath.Join(e.home, "run", "sandbox.sock"), noRuntime, "--policy-file", local)
	if !strings.Contains(sv.stderr.String(), "backend not usable at start-up") {
		t.Errorf("serve without a runtime logged no warning: %s", sv.stderr)
	}
	ctx := context.Background()
	resp, err := sv.cl.Run(ctx, types.RunRequest{Policy: "loc", Command: "echo usable", Cwd: e.workspace})
	if err != nil || resp.Result.Stdout.Text != "usable\n" {
		t.Errorf("a call of the local policy = %+v, %v; want its output", resp, err)
	}
	_, err = sv.cl.Run(ctx, types.RunRequest{Policy: "workspace-write", Command: "echo ran", Cwd: e.workspace})
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), `runtime "runc"`) {
		t.Errorf("a call of workspace-write without runc = %v; want unavailable naming the runtime", err)
	}
}
