package idmap

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// TestStageSession stages a session directory of uid 1000 (0700, with a
// 0600 transcript) for a call of host uid 4321: through the mount the
// directory and the transcript belong to 4321, on disk they stay 1000's,
// and nothing can be written, renamed or removed through it. A call that
// already is the owner gets a plain read-only clone; a link is refused.
func TestStageSession(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("id-mapped mounts need root (this test runs as uid %d)", os.Geteuid())
	}
	base := t.TempDir()
	src := filepath.Join(base, "session")
	if err := os.Mkdir(src, 0o700); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(src, "session.jsonl")
	if err := os.WriteFile(file, []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{src, file} {
		if err := os.Chown(p, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name     string
		uid, gid uint32
	}{{"other-uid", 4321, 4322}, {"owner", 1000, 1000}} {
		t.Run(c.name, func(t *testing.T) {
			target := filepath.Join(base, "staged-"+c.name)
			if err := StageSession(src, target, c.uid, c.gid, unix.MOUNT_ATTR_NOEXEC); err != nil {
				t.Fatalf("StageSession = %v", err)
			}
			defer os.Remove(target)
			defer unix.Unmount(target, unix.MNT_DETACH)
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(target, "session.jsonl"), &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != c.uid || st.Gid != c.gid {
				t.Errorf("through the mount the transcript is %d:%d, want %d:%d", st.Uid, st.Gid, c.uid, c.gid)
			}
			if uid := ownerOf(t, file); uid != 1000 {
				t.Errorf("on disk the transcript is owned by %d, want 1000", uid)
			}
			if err := os.WriteFile(filepath.Join(target, "session.jsonl"), []byte("x"), 0o600); !errors.Is(err, unix.EROFS) {
				t.Errorf("write through the mount = %v, want EROFS", err)
			}
			if err := os.Rename(filepath.Join(target, "session.jsonl"), filepath.Join(target, "moved")); !errors.Is(err, unix.EROFS) {
				t.Errorf("rename through the mount = %v, want EROFS", err)
			}
			var sfs unix.Statfs_t
			if err := unix.Statfs(target, &sfs); err != nil {
				t.Fatal(err)
			}
			for _, f := range []int64{unix.ST_RDONLY, unix.ST_NOSUID, unix.ST_NODEV, unix.ST_NOEXEC} {
				if sfs.Flags&f == 0 {
					t.Errorf("staging mount flags %#x lack %#x", sfs.Flags, f)
				}
			}
		})
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(base, "staged-link")
	if err := StageSession(link, target, 4321, 4321, 0); err == nil {
		unix.Unmount(target, unix.MNT_DETACH)
		t.Errorf("StageSession through a symbolic link = nil, want refused")
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused staging left %s (%v)", target, err)
	}
}

// TestCallHostIDs maps the spec's user through its user namespace maps;
// without maps the user is the host's.
func TestCallHostIDs(t *testing.T) {
	s := &specs.Spec{Process: &specs.Process{User: specs.User{UID: 0, GID: 0}}, Linux: &specs.Linux{
		UIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 1 << 31, Size: 65536}},
		GIDMappings: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 1 << 31, Size: 65536}},
	}}
	if u, g, err := CallHostIDs(s); err != nil || u != 1<<31 || g != 1<<31 {
		t.Errorf("CallHostIDs(mapped root) = %d, %d, %v; want 2^31, 2^31", u, g, err)
	}
	s.Process.User = specs.User{UID: 70000, GID: 0}
	if _, _, err := CallHostIDs(s); err == nil {
		t.Errorf("CallHostIDs(unmapped uid) = nil error, want one")
	}
	s.Linux = nil
	if u, g, err := CallHostIDs(s); err != nil || u != 70000 || g != 0 {
		t.Errorf("CallHostIDs(no user namespace) = %d, %d, %v; want 70000, 0", u, g, err)
	}
}

// BenchmarkStageSession is the staging of a session directory (stage
// and unmount) for a call that is its owner (a plain read-only clone)
// and for one that is not (an id-mapped clone through a new user
// namespace), interleaved: go test -run '^$' -bench StageSession.
func BenchmarkStageSession(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skipf("id-mapped mounts need root (uid %d)", os.Geteuid())
	}
	base := b.TempDir()
	src := filepath.Join(base, "session")
	if err := os.Mkdir(src, 0o700); err != nil {
		b.Fatal(err)
	}
	if err := os.Chown(src, 1000, 1000); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		uid  uint32
	}{{"owner", 1000}, {"other-uid", 4321}} {
		b.Run(c.name, func(b *testing.B) {
			target := filepath.Join(base, "staged-"+c.name)
			for b.Loop() {
				if err := StageSession(src, target, c.uid, c.uid, 0); err != nil {
					b.Fatal(err)
				}
				if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
					b.Fatal(err)
				}
				if err := os.Remove(target); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
