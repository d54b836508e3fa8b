package policy

import (
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
var defaultSeccomp = sync.OnceValues(func() (*specs.LinuxSeccomp, error) {
	noCaps := &specs.Spec{Process: &specs.Process{Capabilities: &specs.LinuxCapabilities{}}}
	return seccomp.GetDefaultProfile(noCaps)
})

// WithDefaultSeccomp installs Docker's default seccomp profile
// (github.com/moby/profiles/seccomp): unlisted system calls fail with
// EPERM, and the calls that need a capability the process lacks are not
// listed. Each spec gets its own copy. It fails with sandbox.ErrInternal
// when the profile cannot be built for this host.
func WithDefaultSeccomp() sandbox.SpecOpt {
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
