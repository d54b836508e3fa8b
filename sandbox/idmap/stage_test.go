package idmap

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// requireRoot skips a test that mounts unless it runs as root.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("staging mounts need root (this test runs as uid %d)", os.Geteuid())
	}
}

// TestStageAtCases: StageAt makes the staging point after what the
// source is (a directory, or a file for a regular file), the mount has
// nosuid and nodev plus what attrs asks, and it refuses a link, a FIFO,
// a socket, a magic link of /proc and an existing target, leaving no
// staging point behind.
func TestStageAtCases(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	dir := filepath.Join(base, "dir")
	file := filepath.Join(base, "file")
	fifo := filepath.Join(base, "fifo")
	link := filepath.Join(base, "link")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(base, "sock")
	sfd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(sfd)
	if err := unix.Bind(sfd, &unix.SockaddrUnix{Name: sock}); err != nil {
		t.Fatal(err)
	}
	points := t.TempDir()
	for i, c := range []struct {
		name, source string
		attrs        uint64
		dir          bool
		flags        uint64 // statfs flags the mount must have
		refused      string // what the error must say; "" when staged
	}{
		{"directory", dir, 0, true, unix.ST_NOSUID | unix.ST_NODEV, ""},
		{"read-only noexec directory", dir, unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOEXEC, true, unix.ST_NOSUID | unix.ST_NODEV | unix.ST_RDONLY | unix.ST_NOEXEC, ""},
		{"regular file", file, unix.MOUNT_ATTR_RDONLY, false, unix.ST_NOSUID | unix.ST_NODEV | unix.ST_RDONLY, ""},
		{"symbolic link", link, 0, false, 0, "is a symbolic link"},
		{"FIFO", fifo, 0, false, 0, "is neither a directory nor a regular file"},
		{"socket", sock, 0, false, 0, "is neither a directory nor a regular file"},
		{"magic link", "/proc/self/cwd", 0, false, 0, "open"},
	} {
		t.Run(c.name, func(t *testing.T) {
			target := filepath.Join(points, strings.Repeat("p", i+1))
			err := StageAt(c.source, target, -1, c.attrs)
			if c.refused != "" {
				if err == nil || !strings.Contains(err.Error(), c.refused) || !strings.Contains(err.Error(), c.source) {
					t.Errorf("StageAt(%s) = %v, want an error naming it and saying %q", c.source, err, c.refused)
				}
				if _, serr := os.Lstat(target); !os.IsNotExist(serr) {
					t.Errorf("staging point after the refusal: %v, want none", serr)
				}
				return
			}
			if err != nil {
				t.Fatalf("StageAt(%s) = %v", c.source, err)
			}
			defer func() {
				if err := Unstage(target); err != nil {
					t.Errorf("Unstage() = %v", err)
				}
				if _, err := os.Lstat(target); !os.IsNotExist(err) {
					t.Errorf("staging point after Unstage(): %v, want none", err)
				}
			}()
			fi, err := os.Stat(target)
			if err != nil || fi.IsDir() != c.dir {
				t.Fatalf("staging point: %v, %v; want a directory %v", fi, err, c.dir)
			}
			var sfs unix.Statfs_t
			if err := unix.Statfs(target, &sfs); err != nil || uint64(sfs.Flags)&c.flags != c.flags {
				t.Errorf("staging mount flags %#x, %v; want %#x set", sfs.Flags, err, c.flags)
			}
			if !c.dir {
				if got, err := os.ReadFile(target); err != nil || string(got) != "data" {
					t.Errorf("the staged file reads %q, %v; want %q", got, err, "data")
				}
			}
			if err := StageAt(c.source, target, -1, c.attrs); err == nil {
				t.Errorf("StageAt(%s) onto an existing staging point = nil, want refused", c.source)
			}
		})
	}
}

// TestUnstageStacked: Unstage detaches every mount stacked on a staging
// point before removing it, and a missing point is no error.
func TestUnstageStacked(t *testing.T) {
	requireRoot(t)
	src, target := t.TempDir(), filepath.Join(t.TempDir(), "0")
	if err := StageAt(src, target, -1, 0); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
		_ = Unstage(target)
		t.Fatal(err)
	}
	if err := Unstage(target); err != nil {
		t.Fatalf("Unstage(two mounts) = %v", err)
	}
	if _, err := os.Lstat(target); !os.IsNotExist(err) {
		t.Errorf("staging point after Unstage(): %v, want none", err)
	}
	if err := Unstage(target); err != nil {
		t.Errorf("Unstage(missing) = %v, want nil", err)
	}
}

// TestRemoveCallDirs: the calls keep reports false for lose their
// staging mounts and directories, the kept ones stay mounted, and the
// instance's directory goes only when the instance is dead.
func TestRemoveCallDirs(t *testing.T) {
	requireRoot(t)
	src := t.TempDir()
	for _, dead := range []bool{false, true} {
		inst := filepath.Join(t.TempDir(), "instance")
		stage := func(call string) string {
			d := filepath.Join(inst, call)
			if err := os.MkdirAll(d, 0o700); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(d, "0")
			if err := StageAt(src, p, -1, 0); err != nil {
				t.Fatal(err)
			}
			return p
		}
		gone, kept := stage("gone"), stage("kept")
		keep := func(call string) bool { return call == "kept" }
		if dead {
			keep = func(string) bool { return false }
		}
		calls, points, err := RemoveCallDirs(inst, dead, keep)
		if err != nil {
			t.Fatalf("RemoveCallDirs(dead %v) = %v", dead, err)
		}
		wantCalls, wantPoints := []string{"gone"}, []string{gone}
		if dead {
			wantCalls, wantPoints = []string{"gone", "kept"}, []string{gone, kept}
		}
		slices.Sort(calls)
		slices.Sort(points)
		if !slices.Equal(calls, wantCalls) || !slices.Equal(points, wantPoints) {
			t.Errorf("RemoveCallDirs(dead %v) = %q, %q; want %q, %q", dead, calls, points, wantCalls, wantPoints)
		}
		if _, err := os.Stat(filepath.Dir(gone)); !os.IsNotExist(err) {
			t.Errorf("removed call's directory: %v, want none", err)
		}
		_, err = os.Stat(inst)
		if dead != os.IsNotExist(err) {
			t.Errorf("dead %v: instance directory: %v", dead, err)
		}
		if !dead {
			var sfs unix.Statfs_t
			if err := unix.Statfs(kept, &sfs); err != nil || sfs.Flags&unix.ST_NOSUID == 0 {
				t.Errorf("kept staging mount: flags %#x, %v; want it still mounted", sfs.Flags, err)
			}
			if _, err := RemoveCallDir(filepath.Dir(kept), []string{kept}); err != nil {
				t.Error(err)
			}
		}
	}
	if calls, points, err := RemoveCallDirs(filepath.Join(t.TempDir(), "missing"), true, nil); err != nil || calls != nil || points != nil {
		t.Errorf("RemoveCallDirs(missing) = %q, %q, %v; want nothing", calls, points, err)
	}
}
