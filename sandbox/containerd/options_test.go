package containerd

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

func TestNewInvalidCases(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"relative-state-dir", Options{Address: "/nonexistent.sock", Service: driver.Service{StateDir: "state"}}},
		{"empty-address", Options{Service: driver.Service{StateDir: dir}}},
		{"bad-namespace", Options{Address: "/nonexistent.sock", Service: driver.Service{StateDir: dir}, Namespace: "bad ns"}},
		{"bad-instance", Options{Address: "/nonexistent.sock", Service: driver.Service{StateDir: dir}, InstanceID: "-x"}},
	} {
		_, err := New(context.Background(), tc.opts)
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("New(%s) = %v, want sandbox.ErrInvalid", tc.name, err)
		}
	}
}

func TestLabelFilterCases(t *testing.T) {
	for _, tc := range []struct{ key, value, want string }{
		{reap.LabelOwner, reap.LabelOwnerValue, `labels."dsh-sandbox.owner"==dsh-sandbox`},
		{reap.LabelInstance, "i-1", `labels."dsh-sandbox.instance"==i-1`},
	} {
		if got := labelFilter(tc.key, tc.value); got != tc.want {
			t.Errorf("labelFilter(%q, %q) = %q, want %q", tc.key, tc.value, got, tc.want)
		}
	}
}

func TestSpecReadonlyRootCases(t *testing.T) {
	p, ok := policy.Builtin(policy.WorkspaceWrite)
	if !ok {
		t.Fatalf("policy.Builtin(%q) not found", policy.WorkspaceWrite)
	}
	p.Backend, p.Image = Backend, "img:latest"
	s := sandbox.Session{ID: "s1", Cwd: t.TempDir()}
	opts, err := policy.SpecOpts(p, s, 0, 0)
	if err != nil {
		t.Fatalf("policy.SpecOpts() = %v", err)
	}
	spec := policy.BaseSpec("rootfs", nil)
	for _, o := range append(opts, policy.WithCgroupsPath("/x"), policy.WithAnnotations(map[string]string{"k": "v"})) {
		if err := o(spec); err != nil {
			t.Fatalf("spec option = %v", err)
		}
	}
	if spec.Root == nil || !spec.Root.Readonly || spec.Root.Path != "rootfs" {
		t.Errorf("spec.Root = %+v, want read-only rootfs", spec.Root)
	}
	if spec.Linux.CgroupsPath != "/x" || spec.Annotations["k"] != "v" {
		t.Errorf("spec cgroupsPath, annotations = %q, %v, want /x, k=v", spec.Linux.CgroupsPath, spec.Annotations)
	}
}

func TestNewUnavailableCases(t *testing.T) {
	dir := t.TempDir()
	addr := dir + "/no-daemon.sock"
	_, err := New(context.Background(), Options{Address: addr, Service: driver.Service{StateDir: dir}})
	if !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("New(Address %q) = %v, want sandbox.ErrUnavailable", "no-daemon.sock", err)
	}
}

func TestCheckRuntimeCases(t *testing.T) {
	for _, tc := range []struct {
		runtime string
		ok      bool
	}{
		{"", true},
		{"runc", true},
		{"crun", false},
		{"runsc", false},
		{"../runc", false},
	} {
		err := checkRuntime(tc.runtime)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, sandbox.ErrInvalid)) {
			t.Errorf("checkRuntime(%q) = %v, want ok %v (else sandbox.ErrInvalid)", tc.runtime, err, tc.ok)
		}
	}
	if err := checkRuntime("crun"); err == nil || !strings.Contains(err.Error(), "hybrid cgroup") {
		t.Errorf("checkRuntime(%q) = %v, want the reason (hybrid cgroup host)", "crun", err)
	}
}

func TestCgroupsPathCases(t *testing.T) {
	for _, tc := range []struct{ instance, call, want string }{
		{"i-1", "c1", "/dsh-sandbox-containerd/i-1/c1"},
		{"svc.a", "bash-2", "/dsh-sandbox-containerd/svc.a/bash-2"},
	} {
		if got := cgroupsPath(tc.instance, tc.call); got != tc.want {
			t.Errorf("cgroupsPath(%q, %q) = %q, want %q", tc.instance, tc.call, got, tc.want)
		}
	}
}
