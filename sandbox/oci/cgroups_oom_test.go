package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestPrepareOOMAccountingV1: on cgroup v1 the call's memory cgroup gets
// the policy's limits and the container's own limits are raised by the
// headroom, so the call's cgroup (which outlives the container) is the
// one that runs out of memory; on v2, and without a memory limit,
// nothing changes.
func TestPrepareOOMAccountingV1(t *testing.T) {
	root := t.TempDir()
	mem := filepath.Join(root, "memory")
	l := cgroupLayout{hybrid: true, mounts: []cgroupMount{
		{point: mem, root: "/", subsystems: []string{"memory"}},
		{point: filepath.Join(root, "pids"), root: "/", subsystems: []string{"pids"}},
		{point: filepath.Join(root, "unified"), root: "/", v2: true},
	}}
	limit := int64(64 << 20)
	spec := &specs.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: ptr(limit), Swap: ptr(limit)},
	}}}
	// A plain directory stands in for the memory cgroup: the kernel's
	// files are made up front, and registering the eventfd is a write
	// of a regular file there.
	dir := filepath.Join(mem, "dsh-sandbox", "i-1", "call-1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"memory.oom_control", "memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "cgroup.event_control"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := l.prepareOOMAccounting(cgroupsPath("i-1", "call-1"), spec)
	if err != nil {
		t.Fatalf("prepareOOMAccounting() = %v", err)
	}
	defer w.close()
	for _, f := range []string{"memory.limit_in_bytes", "memory.memsw.limit_in_bytes"} {
		got, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil || strings.TrimSpace(string(got)) != "67108864" {
			t.Errorf("%s = %q, %v; want the policy's limit 67108864", f, got, err)
		}
	}
	if m := spec.Linux.Resources.Memory; *m.Limit != limit+oomHeadroom || *m.Swap != limit+oomHeadroom {
		t.Errorf("container limits = %d / %d, want %d (limit plus headroom)", *m.Limit, *m.Swap, limit+oomHeadroom)
	}
	if _, err := os.Stat(filepath.Join(root, "pids", "dsh-sandbox")); !os.IsNotExist(err) {
		t.Errorf("a non-memory hierarchy got a directory: %v", err)
	}
	if w.fired() {
		t.Errorf("fired() = true before anything ran out of memory")
	}

	v2 := cgroupLayout{v2: true, mounts: []cgroupMount{{point: filepath.Join(root, "v2"), root: "/", v2: true}}}
	spec2 := &specs.Spec{Linux: &specs.Linux{Resources: &specs.LinuxResources{Memory: &specs.LinuxMemory{Limit: ptr(limit)}}}}
	if w, err := v2.prepareOOMAccounting(cgroupsPath("i-1", "call-2"), spec2); err != nil || w != nil || *spec2.Linux.Resources.Memory.Limit != limit {
		t.Errorf("v2: prepareOOMAccounting() = %v, %v, limit %d; want nothing done", w, err, *spec2.Linux.Resources.Memory.Limit)
	}
	noLimit := &specs.Spec{Linux: &specs.Linux{}}
	if w, err := l.prepareOOMAccounting(cgroupsPath("i-1", "call-3"), noLimit); err != nil || w != nil {
		t.Errorf("no memory limit: prepareOOMAccounting() = %v, %v; want nothing done", w, err)
	}
	if got := containerCgroupsPath("i-1", "call-1"); got != "/dsh-sandbox/i-1/call-1/container" {
		t.Errorf("containerCgroupsPath() = %q, want /dsh-sandbox/i-1/call-1/container", got)
	}
}
