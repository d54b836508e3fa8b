package oci

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestCrunMountNamespaceHidesUnified checks the crun workaround of a
// hybrid cgroup host: a process started from the namespace thread sees no
// cgroup2 mount, and the host still has it (the unmount did not
// propagate).
func TestCrunMountNamespaceHidesUnified(t *testing.T) {
	requireRuntime(t, RuntimeCrun)
	layout, err := readCgroupLayout()
	if err != nil {
		t.Fatal(err)
	}
	hide := layout.unifiedMounts()
	if len(hide) == 0 {
		t.Skip("not a hybrid cgroup host: crun needs no workaround here")
	}
	ns, err := newMountNamespace(hide)
	if err != nil {
		t.Fatalf("newMountNamespace(%q) = %v", hide, err)
	}
	cmd := exec.Command("/bin/cat", "/proc/self/mountinfo")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := ns.start(cmd); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	ns.close()
	for _, line := range strings.Split(out.String(), "\n") {
		if m, ok := parseCgroupMountinfo(line); ok && m.v2 {
			t.Errorf("inside the namespace a cgroup2 mount remains: %q", line)
		}
	}
	host, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range hide {
		if !strings.Contains(string(host), " "+p+" ") {
			t.Errorf("the host lost its mount %s: the unmount propagated", p)
		}
	}
	if err := ns.start(exec.Command("/bin/true")); err == nil {
		t.Errorf("start after close = nil, want an error")
	}
}
