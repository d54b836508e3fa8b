//go:build integration

package integration

import (
	"os"
	"path/filepath"
	"testing"
)

// TestContribConfigServesAndExecs: contrib/dsh-sandbox.yaml works as
// shipped for serve and for a client: serve starts with it, and exec
// --server with it runs a call. Only the machine's paths (home, state,
// data, workspace roots, socket, audit log) are overridden, by flags,
// which win over the file.
func TestContribConfigServesAndExecs(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	// A copy with the mode an operator installs it with: the checkout's
	// own mode follows the umask of whoever cloned it, and a config that
	// others can write is refused.
	shipped, err := os.ReadFile(filepath.Join("..", "contrib", "dsh-sandbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "dsh-sandbox.yaml")
	if err := os.WriteFile(cfg, shipped, 0o644); err != nil {
		t.Fatal(err)
	}
	machine := []string{"--config", cfg, "--workspace-roots", e.workspace}
	sock := filepath.Join(e.home, "run", "sandbox.sock")
	startServeAt(t, e, sock, append(machine, "--listen", "unix://"+sock, "--audit-log", filepath.Join(e.data, "audit.jsonl"))...)
	args := append(append(append([]string{"exec"}, e.flags("s1")...), machine...), "--server", "unix://"+sock, "--", "echo via-config")
	if r := run(t, nil, args...); r.code != 0 || r.stdout != "via-config\n" {
		t.Errorf("exec --server with the example config = %d, %q, stderr %q; want 0 and via-config", r.code, r.stdout, r.stderr)
	}
}
