package sandbox

import (
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
)

// A Plan says which host paths a call sees, where, and how: the one
// answer that enforcement (the OCI spec of the oci and containerd
// backends, the docker backend's container configuration, prepare.Call's
// workdir and spill, prepare.Paths' directories) and reporting (the audit
// record, hook mounts, `policy check`, warnings) all read. NewPlan builds
// it; policy.Plan checks the policy and session first and is what callers
// outside this package use.

// MountKind says why a call sees a mount.
type MountKind string

// Mount kinds.
const (
	// MountTmpfs is a tmpfs of Policy.Tmpfs (and /tmp, always).
	MountTmpfs MountKind = "tmpfs"
	// MountWorkspace is the session's workspace, Session.Cwd.
	MountWorkspace MountKind = "workspace"
	// MountTranscript is the session directory, Session.TranscriptDir.
	MountTranscript MountKind = "transcript"
	// MountPolicy is a bind mount of Policy.Mounts.
	MountPolicy MountKind = "policy-mount"
	// MountRequested is a bind mount a call asked for below the policy's
	// MountRoots (Mount.FromRoot, policy.Narrow).
	MountRequested MountKind = "mount-root"
)

// Identity is the uid and gid a call runs as, inside its container.
type Identity struct {
	UID, GID uint32
}

// PlanMount is one mount of a call, independent of any backend's
// spelling.
type PlanMount struct {
	Kind MountKind `json:"kind"`
	// Source is the host path of a bind mount (clean, as the policy or
	// session gives it; prepare.Paths resolves it); "tmpfs" for a tmpfs.
	Source string `json:"source"`
	// Target is the absolute, clean path inside the container.
	Target string `json:"target"`
	// Writable is true when the call may write the mount.
	Writable bool `json:"writable"`
	// NoSuid, NoDev and NoExec are the mount's flags; every mount is
	// nosuid and nodev, and the session directory is noexec too.
	NoSuid bool `json:"nosuid"`
	NoDev  bool `json:"nodev"`
	NoExec bool `json:"noexec"`
	// SizeBytes bounds a tmpfs; 0 means the runtime's default.
	SizeBytes int64 `json:"sizeBytes,omitempty"`
	// Mode is the permission of a tmpfs's root: 01777 for /tmp, 0755
	// for the others. Owner, when set, owns that root (the call's
	// identity for every tmpfs but /tmp, which root owns).
	Mode  fs.FileMode `json:"mode,omitempty"`
	Owner *Identity   `json:"owner,omitempty"`
}

// Bind reports whether m is a bind mount (every kind but tmpfs).
func (m PlanMount) Bind() bool { return m.Kind != MountTmpfs }

// PlanDir is a host directory a call needs before it starts.
type PlanDir struct {
	// Path is the clean absolute path.
	Path string `json:"path"`
	// Owner is the harness user who owns it (Session.Owner); Set false
	// means the running process (hostpath.EffectiveOwner).
	Owner Owner `json:"-"`
	// Reader, when set, is the call's identity, which may read the
	// directory through an ACL entry (the directory is mounted).
	Reader Owner `json:"-"`
	// Mode is its permission: 0700.
	Mode fs.FileMode `json:"mode"`
}

// Plan is what one call sees of the host. The zero value is a call with
// no mounts, workdir "" and no session directory; NewPlan never returns
// it. A Plan is a plain value; it is safe to read concurrently.
type Plan struct {
	// Mounts are the call's mounts in the order they are mounted:
	// parents before children; at equal depth tmpfs, workspace,
	// transcript, then the policy's mounts in their order.
	Mounts []PlanMount `json:"mounts"`
	// Workdir is the working directory when the request names none: the
	// session's cwd when the workspace is mounted, else /tmp.
	Workdir string `json:"workdir"`
	// SpillDir is where the call's spill files go, <TranscriptDir>/spill;
	// "" without a session directory (the backend then uses its state
	// directory). SpillInside is true when later calls of the session see
	// it (the session directory is mounted).
	SpillDir    string `json:"spillDir,omitempty"`
	SpillInside bool   `json:"spillInside,omitempty"`
	// Dirs are the directories to create before the call, parents first:
	// the session directory and its spill/ subdirectory; none without a
	// session directory.
	Dirs []PlanDir `json:"dirs,omitempty"`
}

// Binds are the bind mounts of the plan (every mount but tmpfs), in
// order.
func (p Plan) Binds() []PlanMount {
	return slices.DeleteFunc(slices.Clone(p.Mounts), func(m PlanMount) bool { return !m.Bind() })
}

// Mount returns the plan's first mount of kind k; ok is false when it has
// none.
func (p Plan) Mount(k MountKind) (m PlanMount, ok bool) {
	i := slices.IndexFunc(p.Mounts, func(m PlanMount) bool { return m.Kind == k })
	if i < 0 {
		return PlanMount{}, false
	}
	return p.Mounts[i], true
}

// CallTmpfs returns the tmpfs mounts of a call under p: p.Tmpfs, after a
// /tmp of the runtime's default size when p.Tmpfs has no /tmp. This is
// the one place that gives every call a /tmp: NewPlan, the policy's
// checks and its normal form (package policy) all read it.
func (p Policy) CallTmpfs() []Tmpfs {
	if slices.ContainsFunc(p.Tmpfs, func(t Tmpfs) bool { return t.Target == "/tmp" }) {
		return p.Tmpfs
	}
	return append([]Tmpfs{{Target: "/tmp"}}, p.Tmpfs...)
}

// NewPlan returns the plan of a call under policy p for session s running
// as id. It is pure: it reads no file and checks nothing beyond what it
// needs to decide (paths are cleaned, not resolved). Callers outside this
// package use policy.Plan, which refuses an invalid policy, session paths
// that may not be mounted and mounts that overlap them before it builds
// the same plan; backends resolve the host paths (prepare.Paths).
//
// The rules: /tmp is a tmpfs even when p.Tmpfs lacks it; the workspace is
// mounted at its own path when p.Workspace is "rw" or "ro" and s.Cwd is
// set, writable only for "rw"; the session directory is mounted read-only
// and noexec at its own path when p.Transcript is "ro" and
// s.TranscriptDir is set; the policy's mounts follow, a mount with
// FromRoot of kind MountRequested. Every mount is nosuid and nodev.
func NewPlan(p Policy, s Session, id Identity) Plan {
	var pl Plan
	for _, t := range p.CallTmpfs() {
		m := PlanMount{Kind: MountTmpfs, Source: "tmpfs", Target: filepath.Clean(t.Target), Writable: true,
			NoSuid: true, NoDev: true, SizeBytes: t.SizeBytes, Mode: 0o755, Owner: &Identity{UID: id.UID, GID: id.GID}}
		if m.Target == "/tmp" {
			m.Mode, m.Owner = fs.ModeSticky|0o777, nil
		}
		pl.Mounts = append(pl.Mounts, m)
	}
	pl.Workdir = "/tmp"
	if p.Workspace.Mounted() && s.Cwd != "" {
		cwd := filepath.Clean(s.Cwd)
		pl.Mounts = append(pl.Mounts, PlanMount{Kind: MountWorkspace, Source: cwd, Target: cwd,
			Writable: p.Workspace.Writable(), NoSuid: true, NoDev: true})
		pl.Workdir = cwd
	}
	if s.TranscriptDir != "" {
		td := filepath.Clean(s.TranscriptDir)
		inside := p.Transcript.Mounted()
		if inside {
			pl.Mounts = append(pl.Mounts, PlanMount{Kind: MountTranscript, Source: td, Target: td,
				NoSuid: true, NoDev: true, NoExec: true})
		}
		var reader Owner
		if inside {
			reader = Owner{UID: id.UID, GID: id.GID, Set: true}
		}
		pl.SpillDir, pl.SpillInside = filepath.Join(td, "spill"), inside
		pl.Dirs = []PlanDir{
			{Path: td, Owner: s.Owner, Reader: reader, Mode: 0o700},
			{Path: pl.SpillDir, Owner: s.Owner, Reader: reader, Mode: 0o700},
		}
	}
	for _, m := range p.Mounts {
		k := MountPolicy
		if m.FromRoot {
			k = MountRequested
		}
		pl.Mounts = append(pl.Mounts, PlanMount{Kind: k, Source: filepath.Clean(m.Source), Target: filepath.Clean(m.Target),
			Writable: !m.ReadOnly, NoSuid: true, NoDev: true})
	}
	// Parents first; at equal depth the order above stands.
	slices.SortStableFunc(pl.Mounts, func(a, b PlanMount) int { return PathDepth(a.Target) - PathDepth(b.Target) })
	return pl
}

// PathDepth is the number of components of a clean absolute path: 0 for
// "/". Mounts are made in the order of their targets' depth.
func PathDepth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}
