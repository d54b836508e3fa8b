package docker

import (
	"os"
	"path/filepath"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/idmap"
)

// requireRoot skips a test that mounts unless it runs as root; under
// CI=true it fails instead.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but staging mounts need root (running as uid %d)", os.Geteuid())
	}
	t.Skipf("staging mounts need root (running as uid %d)", os.Geteuid())
}

// TestStageBindsFlags: every staged bind carries nosuid and nodev, plus
// noexec and read-only where the policy mount says so, writes go through
// a read-write one and not through a read-only one, and release leaves
// nothing mounted or on disk; the same for id-mapped staging mounts
// (an engine that remaps user namespaces), through which on-disk uid 0
// is the engine's root uid.
func TestStageBindsFlags(t *testing.T) {
	requireRoot(t)
	t.Run("plain", func(t *testing.T) { testStageBindsFlags(t, -1) })
	t.Run("idmapped", func(t *testing.T) {
		m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}
		ns, err := idmap.NewUserNamespace(m, m)
		if err != nil {
			t.Fatalf("NewUserNamespace() = %v", err)
		}
		defer ns.Close()
		testStageBindsFlags(t, int(ns.Fd()))
	})
}

func testStageBindsFlags(t *testing.T, usernsFD int) {
	e := &Executor{opts: Options{Service: driver.Service{StateDir: t.TempDir()}}, instance: "i-test"}
	rw, ro, file := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	ms := []specs.Mount{
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev"}},
		{Destination: "/ws", Type: "bind", Source: rw, Options: []string{"bind", "nosuid", "nodev", "rw"}},
		{Destination: "/tr", Type: "bind", Source: ro, Options: []string{"bind", "nosuid", "nodev", "ro", "noexec"}},
		{Destination: "/f", Type: "bind", Source: file, Options: []string{"bind", "nosuid", "nodev", "ro"}},
	}
	binds, release, err := e.stageBinds("call-1", ms, usernsFD, sessionBind{})
	if err != nil {
		t.Fatalf("stageBinds() = %v", err)
	}
	released := false
	t.Cleanup(func() {
		if !released {
			_ = release()
		}
	})
	if len(binds) != 3 {
		t.Fatalf("stageBinds() staged %d binds, want 3 (tmpfs is not staged): %+v", len(binds), binds)
	}
	for i, tc := range []struct {
		target string
		want   uint64
		not    uint64
	}{
		{"/ws", unix.ST_NOSUID | unix.ST_NODEV, unix.ST_NOEXEC | unix.ST_RDONLY},
		{"/tr", unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC | unix.ST_RDONLY, 0},
		{"/f", unix.ST_NOSUID | unix.ST_NODEV | unix.ST_RDONLY, unix.ST_NOEXEC},
	} {
		b := binds[i]
		if b.Target != tc.target {
			t.Errorf("bind %d target = %q, want %q", i, b.Target, tc.target)
		}
		var sfs unix.Statfs_t
		if err := unix.Statfs(b.Source, &sfs); err != nil {
			t.Fatalf("statfs(%s) = %v", b.Source, err)
		}
		flags := uint64(sfs.Flags)
		if flags&tc.want != tc.want || flags&tc.not != 0 {
			t.Errorf("staging mount for %s has flags %#x, want %#x set and %#x clear", tc.target, flags, tc.want, tc.not)
		}
	}
	if usernsFD >= 0 {
		// On-disk uid k is host uid 100000+k through the mount.
		own := filepath.Join(rw, "own")
		if err := os.WriteFile(own, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(own, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]uint32{"": 100000, "own": 101000} {
			var st unix.Stat_t
			if err := unix.Stat(filepath.Join(binds[0].Source, name), &st); err != nil || st.Uid != want || st.Gid != want {
				t.Errorf("stat(%q through the id-mapped staging mount) = %d:%d, %v; want %d:%d", name, st.Uid, st.Gid, err, want, want)
			}
		}
	} else {
		if err := os.WriteFile(filepath.Join(binds[0].Source, "new"), []byte("x"), 0o644); err != nil {
			t.Errorf("write through the read-write staging mount = %v, want nil", err)
		}
		if _, err := os.Stat(filepath.Join(rw, "new")); err != nil {
			t.Errorf("the write did not reach the source: %v", err)
		}
	}
	if err := os.WriteFile(filepath.Join(binds[1].Source, "new"), []byte("x"), 0o644); err == nil {
		t.Errorf("write through the read-only staging mount succeeded")
	}
	if got, err := os.ReadFile(binds[2].Source); err != nil || string(got) != "data" {
		t.Errorf("read the staged file = %q, %v; want %q", got, err, "data")
	}
	released = true
	if err := release(); err != nil {
		t.Fatalf("release() = %v", err)
	}
	if _, err := os.Stat(e.bindsDir() + "/i-test"); !os.IsNotExist(err) {
		t.Errorf("staging directory after release: %v, want it gone", err)
	}
	kept := "new"
	if usernsFD >= 0 {
		kept = "own"
	}
	if _, err := os.Stat(filepath.Join(rw, kept)); err != nil {
		t.Errorf("release touched the source: %v", err)
	}
}

// TestStageBindsRefusesSymlink: a bind whose source is a symbolic link
// is refused, and what was staged before it is undone.
func TestStageBindsRefusesSymlink(t *testing.T) {
	requireRoot(t)
	e := &Executor{opts: Options{Service: driver.Service{StateDir: t.TempDir()}}, instance: "i-test"}
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink("/etc", link); err != nil {
		t.Fatal(err)
	}
	ms := []specs.Mount{
		{Destination: "/ok", Type: "bind", Source: dir, Options: []string{"bind", "rw"}},
		{Destination: "/bad", Type: "bind", Source: link, Options: []string{"bind", "ro"}},
	}
	if _, _, err := e.stageBinds("call-2", ms, -1, sessionBind{}); err == nil {
		t.Fatalf("stageBinds(symlink source) = nil error, want a refusal")
	}
	if _, err := os.Stat(filepath.Join(e.bindsDir(), "i-test")); !os.IsNotExist(err) {
		t.Errorf("staging directory after the refusal: %v, want it gone", err)
	}
}

// TestReapBinds: Reap's helper unmounts and removes a dead call's
// staging mounts and leaves those of a call still running.
func TestReapBinds(t *testing.T) {
	requireRoot(t)
	e := &Executor{opts: Options{Service: driver.Service{StateDir: t.TempDir()}}, instance: "i-test"}
	src := t.TempDir()
	ms := []specs.Mount{{Destination: "/ws", Type: "bind", Source: src, Options: []string{"bind", "rw"}}}
	dead, _, err := e.stageBinds("dead", ms, -1, sessionBind{})
	if err != nil {
		t.Fatal(err)
	}
	live, releaseLive, err := e.stageBinds("live", ms, -1, sessionBind{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = releaseLive() })
	removed, err := e.reapBinds("i-test", func(id string) bool { return id == "live" })
	if err != nil {
		t.Fatalf("reapBinds() = %v", err)
	}
	if len(removed) != 1 || removed[0] != dead[0].Source {
		t.Errorf("reapBinds() removed %q, want [%s]", removed, dead[0].Source)
	}
	if _, err := os.Stat(dead[0].Source); !os.IsNotExist(err) {
		t.Errorf("dead staging mount after reap: %v, want it gone", err)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(live[0].Source, &sfs); err != nil || sfs.Flags&unix.ST_NOSUID == 0 {
		t.Errorf("live staging mount after reap: flags %#x, %v; want it still mounted nosuid", sfs.Flags, err)
	}
	if _, err := os.Stat(src); err != nil {
		t.Errorf("source after reap: %v", err)
	}
}
