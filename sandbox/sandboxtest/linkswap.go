package sandboxtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// LinkSwap stages the check-to-mount race in a backend's test: a
// workspace holding a marker file, and Swap, which renames it away and
// puts a symbolic link to another directory (with another marker) in
// its place, as a call that can write the workspace's parent could with
// a rename loop. The backend test calls Swap at a point of its own
// between prepare.Paths and the runtime's mount, runs Request,
// and checks the outcome with Check or CheckRefused. Not safe for
// concurrent use.
type LinkSwap struct {
	// Workspace is the checked workspace, the session's working
	// directory.
	Workspace    string
	moved, other string
	swapped      bool
}

// NewLinkSwap makes the workspace and the link's target directory, both
// owned by owner (uid and gid).
func NewLinkSwap(t testing.TB, owner int) *LinkSwap {
	t.Helper()
	dir := t.TempDir()
	s := &LinkSwap{Workspace: filepath.Join(dir, "ws"), moved: filepath.Join(dir, "ws.checked"), other: filepath.Join(dir, "other")}
	for d, text := range map[string]string{s.Workspace: "checked", s.other: "link-target"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "marker"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, owner, owner); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// Request is a call of policy p in the workspace that prints the
// workspace's marker and writes a file there.
func (s *LinkSwap) Request(p sandbox.Policy) *sandbox.Request {
	ws := s.Workspace
	return &sandbox.Request{
		Command: "cat " + ws + "/marker; echo written > " + ws + "/new",
		Policy:  p,
		Session: sandbox.Session{ID: "s", Cwd: ws},
	}
}

// Swap replaces the workspace by a symbolic link to the other
// directory, once.
func (s *LinkSwap) Swap() error {
	if s.swapped {
		return nil
	}
	s.swapped = true
	if err := os.Rename(s.Workspace, s.moved); err != nil {
		return err
	}
	return os.Symlink(s.other, s.Workspace)
}

// Check asserts that the call ran after Swap in the checked directory:
// it read the workspace's marker and wrote there, never into the link's
// target.
func (s *LinkSwap) Check(t testing.TB, res *sandbox.Result, err error) {
	t.Helper()
	if !s.swapped {
		t.Fatal("the workspace was never swapped")
	}
	if err != nil || sandbox.ExitCode(res, nil) != 0 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if got := strings.TrimSpace(res.Stdout.Text); got != "checked" {
		t.Errorf("the call read marker %q in its workspace, want %q (the checked directory)", got, "checked")
	}
	if _, err := os.Stat(filepath.Join(s.moved, "new")); err != nil {
		t.Errorf("the call's write did not land in the checked directory: %v", err)
	}
	s.checkTarget(t)
}

// CheckRefused asserts that the call failed after Swap without running.
func (s *LinkSwap) CheckRefused(t testing.TB, res *sandbox.Result, err error) {
	t.Helper()
	if !s.swapped {
		t.Fatal("the workspace was never swapped")
	}
	if err == nil {
		t.Errorf("Run with the workspace a link = %+v, want an error", res)
	}
	s.checkTarget(t)
}

func (s *LinkSwap) checkTarget(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(s.other, "new")); err == nil {
		t.Error("the call wrote into the link's target")
	}
}
