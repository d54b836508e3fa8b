package policy

import (
	"math"
	"slices"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// SpecOpt mutates an OCI runtime spec. Options are pure functions of their
// arguments so that they can be tested without a runtime; backends that
// speak OCI (oci, containerd) apply the same options.
type SpecOpt func(*specs.Spec) error

// cpuPeriod is the CFS period the CPU quota is expressed in: 100 ms.
const cpuPeriod = 100000

// Rlimits every call gets. A soft limit of 1024 open files is the usual
// Linux default; the hard limit lets a command raise it fourfold. Core
// dumps are off so that a crash cannot fill the workspace.
const (
	NofileSoft = 1024
	NofileHard = 4096
)

// Hostname is the host name a call sees in its own UTS namespace when the
// base spec sets none, so that the host's name does not leak in.
const Hostname = "dsh-sandbox"

// Paths Docker masks (bind-mounts /dev/null or an empty tmpfs over) and
// makes read-only in every container, plus host-identifying files Docker
// leaves readable: /proc/cmdline (the host's boot parameters, which may
// name its control channels) and /sys/kernel/vmcoreinfo (kernel symbol
// addresses for crash dumps, which defeat KASLR). A path the host lacks is
// skipped by every runtime.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/cmdline", "/proc/interrupts", "/proc/kcore",
		"/proc/keys", "/proc/latency_stats", "/proc/sched_debug", "/proc/scsi",
		"/proc/timer_list", "/proc/timer_stats", "/sys/devices/virtual/powercap",
		"/sys/firmware", "/sys/kernel/vmcoreinfo",
	}
	readonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// allowedDevices are the character devices a call may open (read, write,
// mknod): null, zero, full, random, urandom and tty. Everything else is
// denied.
var allowedDevices = []struct{ major, minor int64 }{
	{1, 3}, {1, 5}, {1, 7}, {1, 8}, {1, 9}, {5, 0},
}

// SpecOpts returns the options that confine one call under p for the
// session s, run as uid:gid (from ResolveUser or the policy), in the order
// a backend applies them on top of its own base spec (process args, env
// and cwd, the rootfs path, and the /proc, /dev and /sys mounts):
// WithNamespaces, WithNoCapabilities, WithNoNewPrivileges,
// WithDefaultSeccomp, WithMaskedPaths, WithDeviceAllowList, WithResources,
// WithReadonlyRoot, WithUser, WithRlimits and WithMounts of the call's
// Plan (SpecMounts).
//
// p, s and uid:gid are checked by Plan (p's environment settings aside,
// which the spec does not carry); zero limits take their defaults. Errors
// are Plan's. The options are pure and independent of each other;
// each is safe to apply to many specs concurrently.
func SpecOpts(p sandbox.Policy, s sandbox.Session, uid, gid uint32) ([]SpecOpt, error) {
	plan, err := Plan(p, s, Identity{UID: uid, GID: gid})
	if err != nil {
		return nil, err
	}
	return []SpecOpt{
		WithNamespaces(),
		WithNoCapabilities(),
		WithNoNewPrivileges(),
		WithDefaultSeccomp(),
		WithMaskedPaths(),
		WithDeviceAllowList(),
		WithResources(p.Limits),
		WithReadonlyRoot(),
		WithUser(uid, gid),
		WithRlimits(),
		WithMounts(SpecMounts(plan)...),
	}, nil
}

func ensureProcess(s *specs.Spec) *specs.Process {
	if s.Process == nil {
		s.Process = &specs.Process{}
	}
	return s.Process
}

func ensureLinux(s *specs.Spec) *specs.Linux {
	if s.Linux == nil {
		s.Linux = &specs.Linux{}
	}
	return s.Linux
}

func ensureResources(s *specs.Spec) *specs.LinuxResources {
	l := ensureLinux(s)
	if l.Resources == nil {
		l.Resources = &specs.LinuxResources{}
	}
	return l.Resources
}

// WithNamespaces gives the call new pid, mount, ipc, uts, network and
// cgroup namespaces, replacing any entry of those types in the spec
// (including one that joins an existing namespace by path) and keeping
// the others. A new network namespace has only the loopback interface,
// for both network "none" and "loopback". The cgroup namespace is rooted
// at the call's own cgroup, so /proc/self/cgroup shows "/" instead of the
// host's cgroup path (which names the instance and the call). It sets the
// host name to Hostname when the spec has none.
func WithNamespaces() SpecOpt {
	types := []specs.LinuxNamespaceType{
		specs.PIDNamespace, specs.MountNamespace, specs.IPCNamespace,
		specs.UTSNamespace, specs.NetworkNamespace, specs.CgroupNamespace,
	}
	return func(s *specs.Spec) error {
		l := ensureLinux(s)
		l.Namespaces = slices.DeleteFunc(l.Namespaces, func(ns specs.LinuxNamespace) bool {
			return slices.Contains(types, ns.Type)
		})
		for _, t := range types {
			l.Namespaces = append(l.Namespaces, specs.LinuxNamespace{Type: t})
		}
		if s.Hostname == "" {
			s.Hostname = Hostname
		}
		return nil
	}
}

// WithNoCapabilities empties all five capability sets, so even uid 0
// inside has no privilege over files or the kernel.
func WithNoCapabilities() SpecOpt {
	return func(s *specs.Spec) error {
		ensureProcess(s).Capabilities = &specs.LinuxCapabilities{
			Bounding: []string{}, Effective: []string{}, Inheritable: []string{},
			Permitted: []string{}, Ambient: []string{},
		}
		return nil
	}
}

// WithNoNewPrivileges sets no_new_privs, so setuid binaries and file
// capabilities grant nothing.
func WithNoNewPrivileges() SpecOpt {
	return func(s *specs.Spec) error {
		ensureProcess(s).NoNewPrivileges = true
		return nil
	}
}

// WithMaskedPaths adds Docker's masked and read-only /proc and /sys paths
// to those the spec already has (/proc/kcore, /proc/keys, /sys/firmware,
// … masked; /proc/sys, /proc/sysrq-trigger, … read-only).
func WithMaskedPaths() SpecOpt {
	return func(s *specs.Spec) error {
		l := ensureLinux(s)
		l.MaskedPaths = union(l.MaskedPaths, maskedPaths)
		l.ReadonlyPaths = union(l.ReadonlyPaths, readonlyPaths)
		return nil
	}
}

func union(have, add []string) []string {
	for _, p := range add {
		if !slices.Contains(have, p) {
			have = append(have, p)
		}
	}
	return have
}

// WithDeviceAllowList replaces the device cgroup rules with "deny all"
// followed by allow rules for /dev/null, zero, full, random, urandom and
// tty.
func WithDeviceAllowList() SpecOpt {
	return func(s *specs.Spec) error {
		r := ensureResources(s)
		r.Devices = make([]specs.LinuxDeviceCgroup, 0, 1+len(allowedDevices))
		r.Devices = append(r.Devices, specs.LinuxDeviceCgroup{Allow: false, Access: "rwm"})
		for _, d := range allowedDevices {
			r.Devices = append(r.Devices, specs.LinuxDeviceCgroup{
				Allow: true, Type: "c", Major: ptr(d.major), Minor: ptr(d.minor), Access: "rwm",
			})
		}
		return nil
	}
}

// WithResources sets the cgroup limits of l (zero fields take their
// defaults): memory with swap included (the memory+swap limit equals the
// memory limit), a CPU quota of l.CPUs cores per 100 ms period, and the
// task limit. Other resource settings in the spec are kept.
func WithResources(l sandbox.Limits) SpecOpt {
	l = LimitsOrDefault(l)
	quota := int64(math.Round(l.CPUs * cpuPeriod))
	return func(s *specs.Spec) error {
		r := ensureResources(s)
		if r.Memory == nil {
			r.Memory = &specs.LinuxMemory{}
		}
		r.Memory.Limit = ptr(l.MemoryBytes)
		r.Memory.Swap = ptr(l.MemoryBytes)
		if r.CPU == nil {
			r.CPU = &specs.LinuxCPU{}
		}
		r.CPU.Quota = ptr(quota)
		r.CPU.Period = ptr(uint64(cpuPeriod))
		r.Pids = &specs.LinuxPids{Limit: ptr(l.Pids)}
		return nil
	}
}

// ReadonlyRoot is whether a call's root file system is read-only: always,
// on every backend. WithReadonlyRoot writes it into a spec; the backends
// that configure a daemon rather than write a spec read it here (docker's
// HostConfig.ReadonlyRootfs, kubernetes's ReadOnlyRootFilesystem).
const ReadonlyRoot = true

// WithReadonlyRoot makes the container's root filesystem read-only
// (ReadonlyRoot).
func WithReadonlyRoot() SpecOpt {
	return func(s *specs.Spec) error {
		if s.Root == nil {
			s.Root = &specs.Root{}
		}
		s.Root.Readonly = ReadonlyRoot
		return nil
	}
}

// WithUser runs the process as uid:gid with no supplementary groups; the
// spec's umask is kept.
func WithUser(uid, gid uint32) SpecOpt {
	return func(s *specs.Spec) error {
		p := ensureProcess(s)
		p.User.UID, p.User.GID, p.User.AdditionalGids = uid, gid, nil
		return nil
	}
}

// WithRlimits sets RLIMIT_NOFILE to NofileSoft/NofileHard and RLIMIT_CORE
// to 0, replacing entries of those types and keeping the others.
func WithRlimits() SpecOpt {
	set := []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Soft: NofileSoft, Hard: NofileHard},
		{Type: "RLIMIT_CORE", Soft: 0, Hard: 0},
	}
	return func(s *specs.Spec) error {
		p := ensureProcess(s)
		p.Rlimits = slices.DeleteFunc(p.Rlimits, func(r specs.POSIXRlimit) bool {
			return slices.ContainsFunc(set, func(n specs.POSIXRlimit) bool { return n.Type == r.Type })
		})
		p.Rlimits = append(p.Rlimits, set...)
		return nil
	}
}

// WithMounts appends ms to the spec's mounts in order, first removing any
// mount the spec has at the same destination.
func WithMounts(ms ...specs.Mount) SpecOpt {
	return func(s *specs.Spec) error {
		s.Mounts = slices.DeleteFunc(s.Mounts, func(have specs.Mount) bool {
			return slices.ContainsFunc(ms, func(m specs.Mount) bool { return m.Destination == have.Destination })
		})
		for _, m := range ms {
			m.Options = slices.Clone(m.Options)
			s.Mounts = append(s.Mounts, m)
		}
		return nil
	}
}

// Mounts returns the OCI spec mounts policy p gives a call of session s
// running as uid:gid: SpecMounts of Plan(p, s, …), parents first. Errors
// are Plan's.
func Mounts(p sandbox.Policy, s sandbox.Session, uid, gid uint32) ([]specs.Mount, error) {
	plan, err := Plan(p, s, Identity{UID: uid, GID: gid})
	if err != nil {
		return nil, err
	}
	return SpecMounts(plan), nil
}

// checkSessionPath accepts an absolute, clean session path that is not /
// and does not lie in /proc, /dev or /sys.
func checkSessionPath(field, p string, ps *problems) bool {
	if !checkAbsPath(field, p, ps) {
		return false
	}
	if reserved(p) != "" {
		ps.add(field, "%q may not be mounted: it is / or lies below /proc, /dev or /sys", p)
		return false
	}
	return true
}

func ptr[T any](v T) *T { return &v }

// WithUserNamespace gives the call a new user namespace with the maps of
// m (see CallIDMapping), replacing any user namespace entry in the spec.
// The process's uid and gid (WithUser) are container ids.
func WithUserNamespace(m IDMapping) SpecOpt {
	return func(s *specs.Spec) error {
		if len(m.UIDs) == 0 || len(m.GIDs) == 0 {
			return invalidf("user namespace: empty uid or gid map")
		}
		l := ensureLinux(s)
		l.Namespaces = slices.DeleteFunc(l.Namespaces, func(ns specs.LinuxNamespace) bool {
			return ns.Type == specs.UserNamespace
		})
		l.Namespaces = append(l.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		l.UIDMappings = slices.Clone(m.UIDs)
		l.GIDMappings = slices.Clone(m.GIDs)
		return nil
	}
}

// modeArgs are the system calls that set a file's mode, with the index
// of their mode argument.
var modeArgs = map[string]uint{
	"chmod": 1, "fchmod": 1, "fchmodat": 2, "fchmodat2": 2,
	"creat": 1, "open": 2, "openat": 3, "mknod": 1, "mknodat": 2,
}

// setidBits are S_ISUID and S_ISGID.
const setidBits = 0o6000

// WithoutSetidModes narrows the seccomp profile (apply it after
// WithDefaultSeccomp) so that no file gets a set-user-ID or
// set-group-ID bit: chmod, fchmod, fchmodat, fchmodat2, creat, open,
// openat, mknod and mknodat fail with EPERM when their mode has S_ISUID or
// S_ISGID, and openat2, whose mode the filter cannot see, fails with
// ENOSYS (C libraries then use openat). A call whose files land on the
// host owned by root (an id-mapped root-owned workspace) must not be able
// to leave a setuid-root program there. It fails with sandbox.ErrInvalid
// when the spec has no seccomp profile.
func WithoutSetidModes() SpecOpt {
	return func(s *specs.Spec) error {
		if s.Linux == nil || s.Linux.Seccomp == nil {
			return invalidf("seccomp: no profile to narrow (apply WithDefaultSeccomp first)")
		}
		sc := s.Linux.Seccomp
		var out []specs.LinuxSyscall
		for _, rule := range sc.Syscalls {
			if rule.Action == specs.ActAllow {
				rule.Names = slices.DeleteFunc(slices.Clone(rule.Names), func(n string) bool {
					_, ok := modeArgs[n]
					return ok || n == "openat2"
				})
				if len(rule.Names) == 0 {
					continue
				}
			}
			out = append(out, rule)
		}
		names := make([]string, 0, len(modeArgs))
		for n := range modeArgs {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			out = append(out, specs.LinuxSyscall{
				Names:  []string{n},
				Action: specs.ActAllow,
				Args:   []specs.LinuxSeccompArg{{Index: modeArgs[n], Value: setidBits, ValueTwo: 0, Op: specs.OpMaskedEqual}},
			})
		}
		out = append(out, specs.LinuxSyscall{Names: []string{"openat2"}, Action: specs.ActErrno, ErrnoRet: ptr(uint(syscall.ENOSYS))})
		sc.Syscalls = out
		return nil
	}
}
