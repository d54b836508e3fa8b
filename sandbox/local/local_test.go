package local

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
)

func localPolicy(t *testing.T) sandbox.Policy {
	t.Helper()
	p, ok := policy.Builtin(policy.WorkspaceWrite)
	if !ok {
		t.Fatalf("policy.Builtin(%q) not found", policy.WorkspaceWrite)
	}
	p.Name, p.Backend, p.Runtime = "local-dev", "local", ""
	return p
}

func requireBash(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("bash is not installed: %v", err)
	}
}

// TestConformance runs the sandboxtest suite as the non-isolating
// baseline.
func TestConformance(t *testing.T) {
	requireBash(t)
	sandboxtest.Run(t, sandboxtest.Subject{
		New: func(t *testing.T) sandbox.Executor {
			e, err := New(Options{Service: driver.Service{StateDir: t.TempDir(), Detector: calls.Detector{}}})
			if err != nil {
				t.Fatalf("New = %v", err)
			}
			return e
		},
		Policy:   localPolicy(t),
		ImageEnv: BaseEnv(),
		Isolated: false,
	})
}

func TestRefusesOtherBackends(t *testing.T) {
	requireBash(t)
	e, err := New(Options{Service: driver.Service{StateDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	for _, backend := range []sandbox.Backend{"oci", "docker", "", "LOCAL"} {
		p := localPolicy(t)
		p.Backend = backend
		_, err := e.Run(context.Background(), &sandbox.Request{Command: "true", Policy: p})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "policy.backend") {
			t.Errorf("Run(backend %q) = %v, want ErrInvalid naming policy.backend", backend, err)
		}
	}
}

func TestNewCases(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		want error
	}{
		{"relative-state", Options{Service: driver.Service{StateDir: "state"}}, sandbox.ErrInvalid},
		{"missing-bash", Options{Service: driver.Service{StateDir: t.TempDir()}, Bash: "/nonexistent/bash"}, sandbox.ErrUnavailable},
	} {
		if _, err := New(tc.opts); !errors.Is(err, tc.want) {
			t.Errorf("New(%s) = %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestExactEnvNotServiceEnv: the child's environment is exactly the
// prepared one; a variable of the service does not leak in.
func TestExactEnvNotServiceEnv(t *testing.T) {
	requireBash(t)
	t.Setenv("LOCAL_TEST_LEAK", "leaked")
	t.Setenv("LANG", "C.UTF-8")
	e, err := New(Options{Service: driver.Service{StateDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	p := localPolicy(t)
	p.EnvInherit = []string{"LANG"}
	res, err := e.Run(context.Background(), &sandbox.Request{
		Command: "cat /proc/$$/environ | tr '\\0' '\\n' | sort",
		Env:     []string{"A=1"},
		DSHEnv:  []string{"DSH_SHELL=1"},
		Policy:  p,
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"A=1", "DSH_SHELL=1", "GIT_PAGER=cat", "HOME=/tmp", "LANG=C.UTF-8", "NO_COLOR=1", "PAGER=cat", "PATH=" + BaseEnv()[1][len("PATH="):], "TERM=dumb"}
	got := strings.Fields(res.Stdout.Text)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("child environ = %q, want exactly %q", got, want)
	}
}
