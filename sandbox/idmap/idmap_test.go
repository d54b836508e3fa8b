package idmap

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestIdmapMount stages an id-mapped mount of a root-owned directory:
// through it the directory's files are owned by the mapped uid, on disk
// they stay root's; a source reached through a symbolic link is refused.
func TestIdmapMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("id-mapped mounts need root (this test runs as uid %d)", os.Geteuid())
	}
	m, err := policy.CallIDMapping(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := NewUserNamespace(m.UIDs, m.GIDs)
	if err != nil {
		t.Fatalf("newUserNamespace = %v", err)
	}
	defer ns.Close()
	base := t.TempDir()
	src := filepath.Join(base, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(base, "staged")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := Mount(src, target, int(ns.Fd())); err != nil {
		t.Fatalf("idmapMount = %v", err)
	}
	defer unix.Unmount(target, unix.MNT_DETACH)
	if uid := ownerOf(t, filepath.Join(target, "f")); uid != policy.MappedIDBase {
		t.Errorf("through the mount f is owned by %d, want %d", uid, policy.MappedIDBase)
	}
	if uid := ownerOf(t, filepath.Join(src, "f")); uid != 0 {
		t.Errorf("on disk f is owned by %d, want 0", uid)
	}
	if err := unix.Unmount(target, 0); err != nil {
		t.Fatalf("unmount: %v", err)
	}

	link := filepath.Join(base, "link")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	if err := Mount(link, target, int(ns.Fd())); err == nil {
		unix.Unmount(target, unix.MNT_DETACH)
		t.Errorf("idmapMount through a symbolic link = nil, want refused")
	}

	// A file is staged on an empty file.
	fileTarget := filepath.Join(base, "staged-file")
	if err := os.WriteFile(fileTarget, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Mount(filepath.Join(src, "f"), fileTarget, int(ns.Fd())); err != nil {
		t.Fatalf("Mount(file) = %v", err)
	}
	defer unix.Unmount(fileTarget, unix.MNT_DETACH)
	if uid := ownerOf(t, fileTarget); uid != policy.MappedIDBase {
		t.Errorf("the staged file is owned by %d, want %d", uid, policy.MappedIDBase)
	}
}

func ownerOf(t *testing.T, p string) uint32 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid
}

// TestSearchable refuses a state directory below a directory others may
// not search, naming it, and accepts it once that directory is 0711.
func TestSearchable(t *testing.T) {
	base := t.TempDir()
	closed := filepath.Join(base, "closed")
	state := filepath.Join(closed, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := Searchable(state); err == nil || !strings.Contains(err.Error(), closed+" ") {
		t.Errorf("Searchable(%s) = %v, want an error naming %s", state, err, closed)
	}
	if err := os.Chmod(closed, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := Searchable(state); err != nil {
		t.Errorf("Searchable(%s) = %v, want nil", state, err)
	}
}

// TestForCall: a call gets a user namespace unless its policy says
// user: host-root; a root call's binds are id-mapped and its accesses
// checked as on-disk uid 0, another uid is mapped 1:1; a uid inside the
// mapped range is refused.
func TestForCall(t *testing.T) {
	root, err := ForCall("test", sandbox.Policy{User: "auto"}, 0, 0)
	if err != nil || !root.Enabled || !root.Idmapped || root.HostUID != policy.MappedIDBase || root.DiskUID != 0 || root.RootUID != policy.MappedIDBase {
		t.Errorf("ForCall(uid 0) = %+v, %v; want a user namespace, id-mapped binds, host uid %d", root, err, policy.MappedIDBase)
	}
	user, err := ForCall("test", sandbox.Policy{User: "auto"}, 1000, 1000)
	if err != nil || !user.Enabled || user.Idmapped || user.HostUID != 1000 || user.DiskUID != 1000 {
		t.Errorf("ForCall(uid 1000) = %+v, %v; want a user namespace with uid 1000 mapped 1:1", user, err)
	}
	host, err := ForCall("test", sandbox.Policy{User: policy.UserHostRoot}, 0, 0)
	if err != nil || host.Enabled || host.HostUID != 0 {
		t.Errorf("ForCall(host-root) = %+v, %v; want no user namespace", host, err)
	}
	if c, err := ForCall("test", sandbox.Policy{User: "auto"}, policy.MappedIDBase+5, 0); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("ForCall(uid in the mapped range) = %+v, %v; want ErrInvalid", c, err)
	}
}
