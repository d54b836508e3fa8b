package containerd

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// ociVersion is written into every spec (the version the oci backend
// writes too).
const ociVersion = "1.0.2"

// baseSpec is the skeleton every call starts from: the kernel
// filesystems a process expects, a read-only root (the snapshot the
// daemon mounts at the bundle's "rootfs") and an empty Linux section for
// the policy options to fill. It matches the oci backend's.
func baseSpec() *specs.Spec {
	return &specs.Spec{
		Version:  ociVersion,
		Process:  &specs.Process{Cwd: "/"},
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Hostname: policy.Hostname,
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc",
				Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs",
				Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts",
				Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm",
				Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue",
				Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs",
				Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Linux: &specs.Linux{},
	}
}

// withProcess sets the command line, environment and working directory.
func withProcess(args, env []string, cwd string) sandbox.SpecOpt {
	return func(s *specs.Spec) error {
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		s.Process.Terminal = false
		s.Process.Args = append([]string(nil), args...)
		s.Process.Env = append([]string(nil), env...)
		s.Process.Cwd = cwd
		return nil
	}
}

// withAnnotations merges labels into the spec's annotations.
func withAnnotations(labels map[string]string) sandbox.SpecOpt {
	return func(s *specs.Spec) error {
		if s.Annotations == nil {
			s.Annotations = make(map[string]string, len(labels))
		}
		for k, v := range labels {
			s.Annotations[k] = v
		}
		return nil
	}
}

// withCgroupsPath sets linux.cgroupsPath.
func withCgroupsPath(p string) sandbox.SpecOpt {
	return func(s *specs.Spec) error {
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		s.Linux.CgroupsPath = p
		return nil
	}
}
