package policy

import (
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// OCIVersion is the runtime-spec version every backend writes: the one
// all runtimes installed here understand (DESIGN §3.11).
const OCIVersion = "1.0.2"

// BaseSpec is the skeleton every call of the oci and containerd backends
// starts from, before the options of SpecOpts: the kernel filesystems a
// process expects, then binds (an image's read-only binds, before any
// policy mount, so that a workspace or transcript path below /usr or /etc
// lands on top of them), a read-only root at rootPath, the hostname and an
// empty Linux section for the policy options to fill.
func BaseSpec(rootPath string, binds []specs.Mount) *specs.Spec {
	s := &specs.Spec{
		Version:  OCIVersion,
		Process:  &specs.Process{Terminal: false, Cwd: "/"},
		Root:     &specs.Root{Path: rootPath, Readonly: true},
		Hostname: Hostname,
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
	s.Mounts = append(s.Mounts, binds...)
	return s
}

// WithProcess sets the command line, environment and working directory.
func WithProcess(args, env []string, cwd string) sandbox.SpecOpt {
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

// WithAnnotations merges labels into the spec's annotations.
func WithAnnotations(labels map[string]string) sandbox.SpecOpt {
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

// WithCgroupsPath sets linux.cgroupsPath.
func WithCgroupsPath(p string) sandbox.SpecOpt {
	return func(s *specs.Spec) error {
		ensureLinux(s).CgroupsPath = p
		return nil
	}
}
