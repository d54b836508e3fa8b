package oci

import (
	"path"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// ociVersion is written into every config.json: the version all three
// runtimes installed here understand (DESIGN §3.11).
const ociVersion = "1.0.2"

// hostname is the UTS hostname of every container.
const hostname = "dsh-sandbox"

// baseSpec is the skeleton every call starts from: the kernel
// filesystems a process expects, the image's read-only binds (before any
// policy mount, so that a workspace or transcript path below /usr or /etc
// lands on top of them), a read-only root, and an empty Linux section for
// the policy options to fill.
func baseSpec(rootPath string, binds []specs.Mount) *specs.Spec {
	s := &specs.Spec{
		Version: ociVersion,
		Process: &specs.Process{
			Terminal: false,
			Cwd:      "/",
		},
		Root:     &specs.Root{Path: rootPath, Readonly: true},
		Hostname: hostname,
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

// roBind is a read-only, non-recursive bind mount of source at target.
func roBind(source, target string) specs.Mount {
	return specs.Mount{
		Destination: target,
		Type:        "bind",
		Source:      source,
		Options:     []string{"bind", "ro", "nosuid", "nodev"},
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

// withReadonlyRoot points the root at rootPath and makes it read-only,
// whatever earlier options said.
func withReadonlyRoot(rootPath string) sandbox.SpecOpt {
	return func(s *specs.Spec) error {
		s.Root = &specs.Root{Path: rootPath, Readonly: true}
		return nil
	}
}

// mountInside reports whether p is at or below one of the destinations.
func mountInside(p string, dests map[string]bool) bool {
	for q := path.Clean(p); ; q = path.Dir(q) {
		if dests[q] {
			return true
		}
		if q == "/" {
			return false
		}
	}
}

// runscPidsHeadroom is added to the host pids limit of a gVisor sandbox:
// on the host the limit counts the Sentry's and gofer's own threads, not
// the application's tasks.
const runscPidsHeadroom = 256

// withRunscPids moves the task limit into a gVisor sandbox. gVisor does
// not enforce pids.max on the application's tasks, but it does enforce
// RLIMIT_NPROC, for every user including root; the host cgroup keeps an
// outer bound with headroom for gVisor itself.
func withRunscPids() sandbox.SpecOpt {
	return func(s *specs.Spec) error {
		if s.Linux == nil || s.Linux.Resources == nil || s.Linux.Resources.Pids == nil ||
			s.Linux.Resources.Pids.Limit == nil || *s.Linux.Resources.Pids.Limit <= 0 {
			return nil
		}
		limit := *s.Linux.Resources.Pids.Limit
		if s.Process == nil {
			s.Process = &specs.Process{}
		}
		rl := s.Process.Rlimits[:0:0]
		for _, r := range s.Process.Rlimits {
			if r.Type != "RLIMIT_NPROC" {
				rl = append(rl, r)
			}
		}
		s.Process.Rlimits = append(rl, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Soft: uint64(limit), Hard: uint64(limit)})
		outer := limit + runscPidsHeadroom
		s.Linux.Resources.Pids = &specs.LinuxPids{Limit: &outer}
		return nil
	}
}
