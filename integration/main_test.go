//go:build integration

package integration

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
)

// binary is the dsh-sandbox binary built for this run.
var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dsh-sandbox-integration-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "dsh-sandbox")
	build := exec.Command("go", "build", "-o", binary, "../cmd/dsh-sandbox")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building dsh-sandbox:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	// The stub goes next to the binary, where the binary finds it, and
	// on PATH for the executors the tests open in this process.
	if _, err := fixtures.BuildStub(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	code := checkContractCoverage(m.Run())
	os.RemoveAll(dir)
	os.Exit(code)
}

// requireRoot skips when the sandbox cannot run here, except in CI where
// everything is installed and a skip would hide a failure.
func requireRoot(t *testing.T) {
	t.Helper()
	var missing []string
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	for _, bin := range []string{"runc", "crun", "runsc"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("missing in CI: %s (scripts/setup.sh installs them)", strings.Join(missing, ", "))
	}
	t.Skipf("needs %s; run scripts/setup.sh as root", strings.Join(missing, ", "))
}

// env is a test's private dsh home, sessions root, workspace and state.
type env struct {
	home, root, workspace, state, data string
}

func newEnv(t *testing.T) env {
	t.Helper()
	base := t.TempDir()
	// The oci backend's mapped container root must search the state
	// directory's ancestors (t.TempDir makes them 0700).
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	e := env{
		home:      filepath.Join(base, "home"),
		root:      filepath.Join(base, "sessions"),
		workspace: filepath.Join(base, "work space"),
		state:     filepath.Join(base, "state"),
		data:      filepath.Join(base, "data"),
	}
	for _, d := range []string{e.home, e.root, e.workspace} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// flags are the global flags that point the CLI at e.
func (e env) flags(sessionID string) []string {
	f := []string{"--home", e.home, "--sessions-root", e.root, "--cwd", e.workspace,
		"--state-dir", e.state, "--data-dir", e.data}
	if sessionID != "" {
		f = append(f, "--session-id", sessionID)
	}
	return f
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs the binary with args and the given extra environment on top of
// a minimal one.
func run(t *testing.T, extraEnv []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := exitStatus(t, cmd.Run(), args) // before the buffers are read
	return result{stdout.String(), stderr.String(), code}
}

// exitStatus is the exit status of a process whose Run or Wait returned
// err; an error other than an exit status (what was run, what) fails t.
func exitStatus(t *testing.T, err error, what any) int {
	t.Helper()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running %v: %v", what, err)
	}
	return 0
}
