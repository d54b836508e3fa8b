package policy

import (
	"encoding/json"
	"runtime"
	"slices"
	"sync"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// defaultSeccomp is Docker's default profile converted once for this
// host's architecture and kernel, for a process with no capabilities (so
// the rules that only CAP_SYS_ADMIN, CAP_SYS_PTRACE, … would unlock are
// left out). It is read-only after construction; WithDefaultSeccomp hands
// out copies.
//
// Two changes to Docker's profile: ioctl is allowed except for the btrfs
// requests on struct btrfs_ioctl_vol_args(_v2) (withoutBtrfsVolumeIoctls),
// and only the host's native architecture is listed (nativeOnly).
var defaultSeccomp = sync.OnceValues(func() (*specs.LinuxSeccomp, error) {
	noCaps := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	prof, err := seccomp.GetDefaultProfile(noCaps)
	if err != nil {
		return nil, err
	}
	withoutBtrfsVolumeIoctls(prof)
	nativeOnly(prof, runtime.GOARCH)
	return prof, nil
})

// nativeArch is the seccomp architecture of each GOARCH whose Docker
// profile also lists compatibility architectures (x86 and x32 beside
// x86_64, arm beside aarch64, …).
var nativeArch = map[string]specs.Arch{
	"amd64":    specs.ArchX86_64,
	"arm64":    specs.ArchAARCH64,
	"mips64":   specs.ArchMIPS64,
	"mips64le": specs.ArchMIPSEL64,
	"ppc64le":  specs.ArchPPC64LE,
	"s390x":    specs.ArchS390X,
	"riscv64":  specs.ArchRISCV64,
}

// nativeOnly narrows prof's architectures to goarch's own. A system call
// made through another ABI (on x86_64: i386's int 0x80, x32) then meets
// the filter's bad-architecture action, and the runtimes (runc, crun)
// kill the process with SIGSYS, instead of running it under a second
// copy of the rules: a call's commands keep no 32-bit system call
// surface, and the runtime compiles one architecture's filter instead
// of three (runc: 98 → 62 ms of CPU per container on the 2-core test
// machine, 15 runs each). 32-bit programs do not run in a call.
func nativeOnly(prof *specs.LinuxSeccomp, goarch string) {
	if a, ok := nativeArch[goarch]; ok && slices.Contains(prof.Architectures, a) {
		prof.Architectures = []specs.Arch{a}
	}
}

// btrfsVolumeIoctls are the ioctl requests _IOW(0x94, nr, 4096 bytes)
// of btrfs: among them BTRFS_IOC_SUBVOL_CREATE(_V2) and
// BTRFS_IOC_SNAP_CREATE(_V2), which need no capability. A subvolume
// created inside a workspace has a qgroup of its own, outside the
// workspace's qgroup limit (limits.workspaceBytes on btrfs): writes
// there would pass the bound. The others of the range (snapshot
// deletion, device and resize requests) need CAP_SYS_ADMIN or are no
// business of a call.
const (
	btrfsVolumeIoctlMask = 0xffffff00
	btrfsVolumeIoctls    = 0x50009400
)

// withoutBtrfsVolumeIoctls replaces the unconditional allowance of ioctl
// in prof by rules that allow it when its request (the low 32 bits of
// argument 1, which is all the kernel reads) is outside
// btrfsVolumeIoctls: one rule per bit of btrfsVolumeIoctlMask, allowing
// the request when that bit differs from the range's, so that the
// rules, OR'ed, allow exactly the requests outside it; the range's fail
// with the profile's default (EPERM).
func withoutBtrfsVolumeIoctls(prof *specs.LinuxSeccomp) {
	for i, rule := range prof.Syscalls {
		if rule.Action == specs.ActAllow && len(rule.Args) == 0 {
			prof.Syscalls[i].Names = slices.DeleteFunc(slices.Clone(rule.Names), func(n string) bool { return n == "ioctl" })
		}
	}
	prof.Syscalls = slices.DeleteFunc(prof.Syscalls, func(r specs.LinuxSyscall) bool { return len(r.Names) == 0 })
	for bit := uint64(1); bit <= 1<<31; bit <<= 1 {
		if btrfsVolumeIoctlMask&bit == 0 {
			continue
		}
		prof.Syscalls = append(prof.Syscalls, specs.LinuxSyscall{
			Names:  []string{"ioctl"},
			Action: specs.ActAllow,
			Args:   []specs.LinuxSeccompArg{{Index: 1, Value: bit, ValueTwo: ^uint64(btrfsVolumeIoctls) & bit, Op: specs.OpMaskedEqual}},
		})
	}
}

// WithDefaultSeccomp installs Docker's default seccomp profile
// (github.com/moby/profiles/seccomp): unlisted system calls fail with
// EPERM, and the calls that need a capability the process lacks are not
// listed. Each spec gets its own copy. It fails with sandbox.ErrInternal
// when the profile cannot be built for this host.
func WithDefaultSeccomp() SpecOpt {
	return func(s *specs.Spec) error {
		prof, err := defaultSeccomp()
		if err != nil {
			return sandbox.Errorf(sandbox.ErrInternal, "policy: building the default seccomp profile: %w", err)
		}
		ensureLinux(s).Seccomp = cloneSeccomp(prof)
		return nil
	}
}

// cloneSeccomp returns a deep copy of a profile.
func cloneSeccomp(in *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	out := *in
	if in.DefaultErrnoRet != nil {
		out.DefaultErrnoRet = ptr(*in.DefaultErrnoRet)
	}
	out.Architectures = slices.Clone(in.Architectures)
	out.Flags = slices.Clone(in.Flags)
	out.Syscalls = make([]specs.LinuxSyscall, len(in.Syscalls))
	for i, sc := range in.Syscalls {
		sc.Names = slices.Clone(sc.Names)
		sc.Args = slices.Clone(sc.Args)
		if sc.ErrnoRet != nil {
			sc.ErrnoRet = ptr(*sc.ErrnoRet)
		}
		out.Syscalls[i] = sc
	}
	return &out
}

// defaultSeccompJSON is defaultSeccomp encoded once as JSON.
var defaultSeccompJSON = sync.OnceValues(func() (string, error) {
	prof, err := defaultSeccomp()
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(prof)
	return string(b), err
})

// DefaultSeccompJSON returns the profile WithDefaultSeccomp installs,
// encoded as JSON in the runtime-spec's field names, for a backend that
// hands a profile to an engine instead of writing a spec (the Docker
// engine reads it from HostConfig.SecurityOpt "seccomp=<json>": its
// profile format uses the same names, and the profile has no
// capability-dependent includes or excludes left to resolve, so the
// engine installs exactly these rules). It is computed once; every call
// returns the same string. It fails with sandbox.ErrInternal when the
// profile cannot be built for this host.
func DefaultSeccompJSON() (string, error) {
	s, err := defaultSeccompJSON()
	if err != nil {
		return "", sandbox.Errorf(sandbox.ErrInternal, "policy: encoding the default seccomp profile: %w", err)
	}
	return s, nil
}
