package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/kubernetes"
)

// TestBuiltinsAreWhatPoliciesName: the backends and runtimes this program
// links are exactly those a policy may name, default first: every
// registered backend, kubernetes included, is one a policy file may name
// (operatorPolicy and `policy check`), another is refused naming the field
// and listing exactly the registered backends, and the runtimes are
// sandbox.Runtimes, so that neither list drifts from the other.
func TestBuiltinsAreWhatPoliciesName(t *testing.T) {
	names := backends.Names(nil)
	if len(names) == 0 || names[0] != sandbox.BackendOCI || !slices.Contains(names, kubernetes.Backend) {
		t.Errorf("registered backends %q, want oci first and kubernetes among them", names)
	}
	dir := t.TempDir()
	write := func(backend string) string {
		f := filepath.Join(dir, backend+".yaml")
		if err := os.WriteFile(f, []byte("backend: "+backend+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	s := &settings{}
	for _, b := range names {
		f := write(string(b))
		if p, err := s.operatorPolicy("policy", f, false); err != nil || p.Backend != b {
			t.Errorf("operatorPolicy(backend: %s) = %q, %v; want the policy", b, p.Backend, err)
		}
		if _, errOut, code := run(t, "--home", t.TempDir(), "policy", "check", f); code != 0 {
			t.Errorf("policy check (backend: %s) = %d, %s; want 0", b, code, errOut)
		}
	}
	want := `backend: "podman" is not allowed; want one of ` + sandbox.JoinModes(names, ", ")
	f := write("podman")
	if _, err := s.operatorPolicy("policy", f, false); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("operatorPolicy(backend: podman) = %v, want an error containing %q", err, want)
	}
	if _, errOut, code := run(t, "--home", t.TempDir(), "policy", "check", f); code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("policy check (backend: podman) = %d, %s; want an error containing %q", code, errOut, want)
	}
	if runtimes := backends.Runtimes(); !slices.Equal(runtimes, sandbox.Runtimes) {
		t.Errorf("registered runtimes %q, want sandbox.Runtimes %q", runtimes, sandbox.Runtimes)
	}
}
