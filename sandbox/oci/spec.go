package oci

import (
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// roBind is a read-only, non-recursive bind mount of source at target.
func roBind(source, target string) specs.Mount {
	return specs.Mount{
		Destination: target,
		Type:        "bind",
		Source:      source,
		Options:     []string{"bind", "ro", "nosuid", "nodev"},
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
func withRunscPids() policy.SpecOpt {
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
