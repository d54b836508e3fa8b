package policy

import (
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// OCIVersion is the runtime-spec version every backend writes: the one
// all runtimes installed here understand (DESIGN §3.11).
const OCIVersion = "1.0.2"

// BaseSpec is the skeleton every call of the oci and containerd backends
// starts from (CallSpec), before the options of SpecOpts: the kernel
// filesystems a process expects, then binds (an image's read-only binds,
// before any policy mount, so that a workspace or transcript path below
// /usr or /etc lands on top of them), the root at rootPath (read-only
// once SpecOpts's WithReadonlyRoot ran), the hostname and an empty Linux
// section for the policy options to fill.
func BaseSpec(rootPath string, binds []specs.Mount) *specs.Spec {
	s := &specs.Spec{
		Version:  OCIVersion,
		Process:  &specs.Process{Terminal: false, Cwd: "/"},
		Root:     &specs.Root{Path: rootPath},
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

// SpecParts are what CallSpec assembles one call's runtime spec from.
type SpecParts struct {
	// Root is the path of the root file system, relative to the bundle
	// ("rootfs") or absolute. Required.
	Root string
	// Binds are an image's read-only binds (BaseSpec); nil means none.
	Binds []specs.Mount
	// Args, Env and Cwd are the call's process (WithProcess).
	Args, Env []string
	Cwd       string
	// Opts confine the call: SpecOpts (which make the root read-only),
	// then the backend's own (user namespace, egress, stub), applied in
	// order after the process.
	Opts []SpecOpt
	// Labels become the spec's annotations; nil means none.
	Labels map[string]string
	// CgroupsPath is linux.cgroupsPath; "" leaves the runtime's default.
	CgroupsPath string
	// Terminal, when set, runs the process on a terminal of that size.
	Terminal *sandbox.WindowSize
}

// CallSpec assembles a call's runtime spec, once for the backends that
// hand a runtime a spec (oci, containerd, and the oci bench baseline):
// BaseSpec(p.Root, p.Binds), the process, p.Opts, the root's path (kept
// read-only as WithReadonlyRoot left it), the annotations, the cgroups
// path and the terminal. Errors are those of an option.
func CallSpec(p SpecParts) (*specs.Spec, error) {
	spec := BaseSpec(p.Root, p.Binds)
	all := append([]SpecOpt{WithProcess(p.Args, p.Env, p.Cwd)}, p.Opts...)
	all = append(all, withRootPath(p.Root))
	if p.Labels != nil {
		all = append(all, WithAnnotations(p.Labels))
	}
	if p.CgroupsPath != "" {
		all = append(all, WithCgroupsPath(p.CgroupsPath))
	}
	if p.Terminal != nil {
		all = append(all, WithTerminal(*p.Terminal))
	}
	for _, o := range all {
		if err := o(spec); err != nil {
			return nil, err
		}
	}
	return spec, nil
}

// withRootPath points the root at path, whatever an option set, keeping
// whether it is read-only.
func withRootPath(path string) SpecOpt {
	return func(s *specs.Spec) error {
		if s.Root == nil {
			s.Root = &specs.Root{}
		}
		s.Root.Path = path
		return nil
	}
}

// WithProcess sets the command line, environment and working directory.
func WithProcess(args, env []string, cwd string) SpecOpt {
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
func WithAnnotations(labels map[string]string) SpecOpt {
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
func WithCgroupsPath(p string) SpecOpt {
	return func(s *specs.Spec) error {
		ensureLinux(s).CgroupsPath = p
		return nil
	}
}
