package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// A policy file a sandboxed call could have written is refused on every
// flag that names one; the same file where only the operator writes is
// accepted.
func TestOperatorPolicyCase(t *testing.T) {
	base := t.TempDir()
	ws := filepath.Join(base, "roots", "proj")
	ops := filepath.Join(base, "ops")
	for _, d := range []string{ws, ops} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(path string, mode os.FileMode) string {
		if err := os.WriteFile(path, []byte("name: "+strings.TrimSuffix(filepath.Base(path), ".yaml")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	inWS := write(filepath.Join(ws, "evil.yaml"), 0o644)
	inRoots := write(filepath.Join(base, "roots", "rooted.yaml"), 0o644)
	good := write(filepath.Join(ops, "good.yaml"), 0o644)
	worldWritable := write(filepath.Join(ops, "ww.yaml"), 0o666)
	link := filepath.Join(ops, "link.yaml")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	s := &settings{cwd: ws, workspaceRoots: []string{filepath.Join(base, "roots")}}
	tests := []struct {
		flag, file string
		withCwd    bool
		want       string // "" for accepted
	}{
		{"policy", "read-only", true, ""},
		{"policy", good, true, ""},
		{"policy", inWS, true, "lies inside the workspace"},
		{"policy", inRoots, true, "lies inside workspace root"},
		{"policy", worldWritable, true, "writable by its group or by others"},
		{"policy", link, true, "is a symbolic link"},
		{"policy-file", good, false, ""},
		{"policy-file", inRoots, false, "lies inside workspace root"},
	}
	for _, tt := range tests {
		p, err := s.operatorPolicy(tt.flag, tt.file, tt.withCwd)
		if tt.want == "" {
			if err != nil || p.Name == "" {
				t.Errorf("operatorPolicy(--%s %s) = %v, want the policy", tt.flag, tt.file, err)
			}
			continue
		}
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "--"+tt.flag+": ") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("operatorPolicy(--%s %s) = %v, want a usage error naming --%s and %q", tt.flag, tt.file, err, tt.flag, tt.want)
		}
	}
	// serve --policy-file: the same checks against the workspace roots.
	if _, err := s.servePolicies([]string{inRoots}); err == nil || !strings.Contains(err.Error(), "--policy-file") {
		t.Errorf("servePolicies(%s) = %v, want it refused naming --policy-file", inRoots, err)
	}
	if ps, err := s.servePolicies([]string{good}); err != nil || ps["good"].Name != "good" {
		t.Errorf("servePolicies(%s) = %v, want the policy good", good, err)
	}
}

// The global --config file of flag defaults is opened as data: a FIFO or a
// link planted in its place is an error at once, a regular file works.
func TestGlobalConfigFileIsData(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "flags.yaml")
	if err := os.WriteFile(good, []byte("home: "+filepath.Join(dir, "home")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ file, want string }{{fifo, "is a FIFO"}, {link, "is a symbolic link"}, {dir, "is a directory"}} {
		_, errOut, code := run(t, "--config", tt.file, "env", "list")
		if code != 2 || !strings.Contains(errOut, "--config") || !strings.Contains(errOut, tt.want) {
			t.Errorf("--config %s: exit %d, stderr %q; want 2 naming --config and %q", tt.file, code, errOut, tt.want)
		}
	}
	if _, errOut, code := run(t, "--config", good, "env", "list"); code != 0 {
		t.Errorf("--config %s: exit %d, stderr %q; want 0", good, code, errOut)
	}
}

// The service's wire request has no argv yet: several words after -- are
// refused with --server rather than joined into a shell string.
func TestExecServerRefusesArgv(t *testing.T) {
	sock := "unix://" + filepath.Join(t.TempDir(), "none.sock")
	_, errOut, code := run(t, "exec", "--cwd", t.TempDir(), "--server", sock, "--", "printf", "%s", "c;d")
	if code != 2 || !strings.Contains(errOut, "--server") || !strings.Contains(errOut, "argv") {
		t.Errorf("exec --server -- printf %%s 'c;d' = exit %d, stderr %q; want 2 naming --server and argv", code, errOut)
	}
	// One word is a command line and goes to the service (which is not
	// there: unavailable, not a usage error).
	_, errOut, code = run(t, "exec", "--cwd", t.TempDir(), "--server", sock, "--", "echo a; echo b")
	if code == 2 || strings.Contains(errOut, "argv") {
		t.Errorf("exec --server -- 'echo a; echo b' = exit %d, stderr %q; want it sent (and the missing service reported)", code, errOut)
	}
}
