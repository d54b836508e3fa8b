package oci

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"
	"time"
)

func TestParseCgroupMountinfoCases(t *testing.T) {
	for _, tc := range []struct {
		line string
		want cgroupMount
		ok   bool
	}{
		{"34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory",
			cgroupMount{point: "/sys/fs/cgroup/memory", root: "/", subsystems: []string{"memory"}}, true},
		{"39 30 0:36 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd",
			cgroupMount{point: "/sys/fs/cgroup/systemd", root: "/", subsystems: []string{"name=systemd"}}, true},
		{"31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct",
			cgroupMount{point: "/sys/fs/cgroup/cpu,cpuacct", root: "/", subsystems: []string{"cpu", "cpuacct"}}, true},
		{"40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw",
			cgroupMount{point: "/sys/fs/cgroup/unified", root: "/", v2: true}, true},
		{"41 30 0:38 /sub /mnt/with\\040space rw - cgroup2 cgroup2 rw",
			cgroupMount{point: "/mnt/with space", root: "/sub", v2: true}, true},
		{"21 26 0:20 / /proc rw,relatime - proc proc rw", cgroupMount{}, false},
		{"garbage", cgroupMount{}, false},
	} {
		got, ok := parseCgroupMountinfo(tc.line)
		if ok != tc.ok || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseCgroupMountinfo(%q) = %+v, %v, want %+v, %v", tc.line, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCgroupLayoutDirsFor(t *testing.T) {
	l := cgroupLayout{mounts: []cgroupMount{
		{point: "/sys/fs/cgroup/memory", root: "/", subsystems: []string{"memory"}},
		{point: "/sys/fs/cgroup/pids", root: "/", subsystems: []string{"pids"}},
		{point: "/sys/fs/cgroup/unified", root: "/", v2: true},
		{point: "/mnt/sub", root: "/other", subsystems: []string{"cpu"}},
		{point: "/mnt/nested", root: "/dsh-sandbox", subsystems: []string{"blkio"}},
	}, hybrid: true}
	got := l.dirsFor("/dsh-sandbox/i-1/call-1")
	want := []string{
		"/mnt/nested/i-1/call-1",
		"/sys/fs/cgroup/memory/dsh-sandbox/i-1/call-1",
		"/sys/fs/cgroup/pids/dsh-sandbox/i-1/call-1",
		"/sys/fs/cgroup/unified/dsh-sandbox/i-1/call-1",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("dirsFor = %q, want %q", got, want)
	}
	if got, want := l.unifiedMounts(), []string{"/sys/fs/cgroup/unified"}; !reflect.DeepEqual(got, want) {
		t.Errorf("unifiedMounts() = %q, want %q", got, want)
	}
	l.hybrid = false
	if got := l.unifiedMounts(); got != nil {
		t.Errorf("unifiedMounts() of a non-hybrid layout = %q, want nil", got)
	}
}

// TestCgroupLayoutControllerDir: a controller's directory is that of
// its v1 hierarchy on a hybrid host (never the controller-less cgroup2
// mount), the cgroup2 one on a pure cgroup2 host, and none where no
// mount has it.
func TestCgroupLayoutControllerDir(t *testing.T) {
	hybrid := cgroupLayout{mounts: []cgroupMount{
		{point: "/sys/fs/cgroup/unified", root: "/", v2: true},
		{point: "/sys/fs/cgroup/memory", root: "/", subsystems: []string{"memory"}},
		{point: "/sys/fs/cgroup/pids", root: "/", subsystems: []string{"pids"}},
	}, hybrid: true}
	v2 := cgroupLayout{mounts: []cgroupMount{{point: "/sys/fs/cgroup", root: "/", v2: true}}, v2: true}
	for _, tc := range []struct {
		l          cgroupLayout
		controller string
		want       string
	}{
		{hybrid, "pids", "/sys/fs/cgroup/pids/d/c"},
		{hybrid, "memory", "/sys/fs/cgroup/memory/d/c"},
		{hybrid, "rdma", ""},
		{v2, "pids", "/sys/fs/cgroup/d/c"},
	} {
		if got := tc.l.controllerDir("/d/c", tc.controller); got != tc.want {
			t.Errorf("controllerDir(%q) = %q, want %q", tc.controller, got, tc.want)
		}
	}
}

func TestWithinRootCases(t *testing.T) {
	for _, tc := range []struct {
		root, p, want string
		ok            bool
	}{
		{"/", "/a/b", "/a/b", true},
		{"/a", "/a/b", "/b", true},
		{"/a", "/a", "/", true},
		{"/a", "/ab/c", "", false},
		{"/a/b", "/a", "", false},
	} {
		got, ok := withinRoot(tc.root, tc.p)
		if got != tc.want || ok != tc.ok {
			t.Errorf("withinRoot(%q, %q) = %q, %v, want %q, %v", tc.root, tc.p, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCgroupsPathShape(t *testing.T) {
	if got, want := cgroupsPath("i-1", "call-2"), "/dsh-sandbox/i-1/call-2"; got != want {
		t.Errorf("cgroupsPath(%q, %q) = %q, want %q", "i-1", "call-2", got, want)
	}
}

// TestMkdirCgroupParentRemovedMeanwhile: while another process removes
// the shared parent whenever it is empty (as Reap does, here every few
// microseconds), mkdirCgroup still makes the first call's directory of an
// instance each time; plain MkdirAll is the variant that loses the race.
func TestMkdirCgroupParentRemovedMeanwhile(t *testing.T) {
	parent := filepath.Join(t.TempDir(), cgroupParent)
	inst := filepath.Join(parent, "i-test")
	call := filepath.Join(inst, "call-1")
	race := func(mkdir func(string) error) (failures, removals int, first error) {
		stop := make(chan struct{})
		done := make(chan int)
		go func() {
			n := 0
			for {
				select {
				case <-stop:
					done <- n
					return
				default:
				}
				if syscall.Rmdir(parent) == nil {
					n++
				}
				time.Sleep(20 * time.Microsecond)
			}
		}()
		for range 2000 {
			if err := mkdir(call); err != nil {
				if failures == 0 {
					first = err
				}
				failures++
				continue
			}
			if err := errors.Join(syscall.Rmdir(call), syscall.Rmdir(inst)); err != nil {
				t.Fatal(err)
			}
		}
		close(stop)
		return failures, <-done, first
	}
	plain := func(dir string) error { return os.MkdirAll(dir, 0o755) }
	if failures, removals, err := race(mkdirCgroup); failures != 0 || removals == 0 {
		t.Errorf("mkdirCgroup: %d of 2000 failed (first: %v) while the parent was removed %d times, want none failed (and some removals)", failures, err, removals)
	}
	failures, removals, err := race(plain)
	t.Logf("plain MkdirAll: %d of 2000 failed (first: %v), the parent removed %d times", failures, err, removals)
}
