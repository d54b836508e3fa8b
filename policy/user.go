package policy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/acl"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/hostpath"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/quota"
)

// ResolveUser returns the uid and gid a call under p for session s runs
// as. A policy user "uid:gid" is returned as given. "auto" is the owner of
// s.Cwd when it exists; else the owner of the nearest existing ancestor of
// s.TranscriptDir below / (so the owner of the sessions root when the
// session directory is not there yet); else nobody, 65534:65534. The root
// directory itself is never a source, so "auto" only yields uid 0 when
// the workspace or the sessions tree belongs to root.
//
// Paths are resolved without following links (hostpath.ResolveDir): a
// symbolic link in the mounted cwd or in an existing ancestor of the
// transcript directory is an error, never a source of identity; a cwd
// that is not mounted (policy workspace "none") and does not resolve is
// skipped.
//
// It reads the file system (stat only). Errors wrap sandbox.ErrInvalid
// for a bad policy user, a relative session path or a link, and
// sandbox.ErrUnavailable when a path cannot be inspected (other than not
// existing).
func ResolveUser(p sandbox.Policy, s sandbox.Session) (uid, gid uint32, err error) {
	uid, gid, auto, err := p.User.IDs()
	if err != nil {
		return 0, 0, invalidf("user: %v", err)
	}
	if !auto {
		return uid, gid, nil
	}
	if s.Cwd != "" {
		var ps problems
		if !checkAbsPath("session.cwd", s.Cwd, &ps) {
			return 0, 0, ps.err("policy")
		}
		info, err := statNoFollow("session.cwd", s.Cwd)
		switch {
		case err == nil:
			return owner(info)
		case !notExist(err) && p.Workspace.Mounted():
			return 0, 0, err
		}
		// A cwd that is not mounted and does not resolve (missing, or
		// behind a link) is no source of identity.
	}
	if s.TranscriptDir != "" {
		var ps problems
		if !checkAbsPath("session.transcriptDir", s.TranscriptDir, &ps) {
			return 0, 0, ps.err("policy")
		}
		for dir := filepath.Clean(s.TranscriptDir); dir != "/"; dir = filepath.Dir(dir) {
			info, err := statNoFollow("session.transcriptDir", dir)
			switch {
			case err == nil:
				return owner(info)
			case !notExist(err):
				return 0, 0, err
			}
		}
	}
	return nobodyID, nobodyID, nil
}

// statNoFollow stats the directory path after resolving it without
// following links (hostpath.ResolveDir): a link in any component is an
// error wrapping sandbox.ErrInvalid and naming field, never followed.
func statNoFollow(field, path string) (fs.FileInfo, error) {
	r, err := hostpath.ResolveDir(field, path)
	if err != nil {
		return nil, err
	}
	info, err := os.Lstat(r)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "policy: user auto: %s %s: %w", field, path, unwrapPathError(err))
	}
	return info, nil
}

// notExist reports whether a stat error means the path is not there,
// including "a component is not a directory".
func notExist(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
}

func owner(info fs.FileInfo) (uid, gid uint32, err error) {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, sandbox.Errorf(sandbox.ErrUnavailable, "policy: user auto: %s: no owner information on this platform", info.Name())
	}
	return st.Uid, st.Gid, nil
}

// Permission bits of one class (owner, group or other).
const (
	permRead  = 4
	permWrite = 2
	permExec  = 1
)

// may reports whether a process running as uid:gid with no supplementary
// groups and no capabilities gets the access bits want on a file, by the
// POSIX rule: the owner class if uid owns it, else the group class if gid
// is its group, else the other class. Capabilities are dropped in every
// call, so uid 0 gets no override. ACLs are not consulted.
func may(info fs.FileInfo, uid, gid uint32, want fs.FileMode) bool {
	st, ok := info.Sys().(*syscall.Stat_t)
	if !ok {
		return true // cannot tell; say nothing
	}
	perm := info.Mode().Perm()
	var bits fs.FileMode
	switch {
	case st.Uid == uid:
		bits = perm >> 6
	case st.Gid == gid:
		bits = perm >> 3
	default:
		bits = perm
	}
	return bits&want == want
}

// describe is "owner 1000:1000, mode 0700" for a warning.
func describe(info fs.FileInfo) string {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return fmt.Sprintf("owner %d:%d, mode %04o", st.Uid, st.Gid, info.Mode().Perm())
	}
	return fmt.Sprintf("mode %04o", info.Mode().Perm())
}

// transcriptFiles are the names a dsh transcript has in its session
// directory (DESIGN §3.2).
var transcriptFiles = []string{"session.jsonl", "session.jsonl.zstd"}

// SessionReadAsOwner reports whether backend b mounts the session
// directory as an id-mapped read-only mount through which its owner,
// the harness user, is the call (idmap.StageSession): oci (runc, crun,
// runsc), containerd and docker. A call there reads the transcript and
// spill files whatever uid it runs as. The local backend does not.
func SessionReadAsOwner(b sandbox.Backend) bool {
	switch b {
	case "", sandbox.BackendOCI, sandbox.BackendContainerd, sandbox.BackendDocker:
		return true
	}
	return false
}

// Warnings says, one sentence each, where a call under p for session s
// running as uid:gid will not be able to do what the policy grants: read
// the transcript on a backend that does not id-map the session directory
// (SessionReadAsOwner; the session directory belongs to the harness
// user, s.Owner or else this process's effective uid, and the service
// lets the call read it and its spill files through an ACL entry, but
// dsh writes the transcript file itself with mode 0600, which no
// directory ACL reaches, so a call running as another uid cannot read it
// unless the file's own mode or ACL allows), read the workspace, or write it when
// it is mounted read-write; when the session directory belongs to a
// third user (the service refuses such calls); and when the workspace is
// missing. It stats the paths and reads their ACLs, nothing else; nil
// means nothing to report. `dsh-sandbox policy check` prints these.
func Warnings(p sandbox.Policy, s sandbox.Session, uid, gid uint32) []string {
	var ws []string
	if HostRoot(p) {
		ws = append(ws, "user: host-root runs calls as host uid 0 without a user namespace: a call can rewrite root-owned files its mounts expose and leave setuid-root programs there")
	}
	// What the call would see: its plan (unchecked: this only advises).
	plan := sandbox.NewPlan(p, s, Identity{UID: uid, GID: gid})
	if _, ok := plan.Mount(sandbox.MountTranscript); ok {
		ws = append(ws, transcriptWarnings(p, s, uid, gid)...)
	}
	if wsm, ok := plan.Mount(sandbox.MountWorkspace); ok {
		ws = append(ws, workspaceWarnings(p, s.Cwd, wsm.Writable, uid, gid)...)
	}
	return ws
}

// transcriptWarnings are Warnings' sentences about the transcript
// directory a call under p for session s, running as uid:gid, mounts.
func transcriptWarnings(p sandbox.Policy, s sandbox.Session, uid, gid uint32) []string {
	var ws []string
	who := fmt.Sprintf("user %d:%d", uid, gid)
	harness := hostpath.EffectiveOwner(s.Owner)
	self := uint32(os.Geteuid())
	info, err := os.Stat(s.TranscriptDir)
	exists := err == nil && info.IsDir()
	switch {
	case notExist(err):
	case err != nil:
		ws = append(ws, fmt.Sprintf("transcript directory %s cannot be inspected: %v", s.TranscriptDir, unwrapPathError(err)))
	case !info.IsDir():
		ws = append(ws, fmt.Sprintf("transcript directory %s is not a directory", s.TranscriptDir))
	default:
		st, ok := info.Sys().(*syscall.Stat_t)
		switch {
		case !ok || st.Uid == harness.UID || st.Uid == self:
		case harness.UID == 0:
			// Root acts for the directory's owner (hostpath.MakeSessionDir).
			harness = sandbox.Owner{UID: st.Uid, GID: st.Gid, Set: true}
		default:
			ws = append(ws, fmt.Sprintf("transcript directory %s belongs to uid %d, neither the harness user (uid %d) nor the service (uid %d); the service refuses calls of this session",
				s.TranscriptDir, st.Uid, harness.UID, self))
		}
	}
	if uid != harness.UID && !SessionReadAsOwner(p.Backend) && (exists || notExist(err)) {
		seen := false
		for _, name := range transcriptFiles {
			path := filepath.Join(s.TranscriptDir, name)
			fi, err := os.Stat(path)
			if err != nil {
				continue
			}
			seen = true
			if ok, err := acl.MayAccess(path, uid, gid, acl.Read); err == nil && !ok {
				ws = append(ws, fmt.Sprintf("%s cannot read the transcript %s (%s): dsh writes it as the harness user (uid %d) and no directory ACL reaches a file created 0600; run calls as uid %d or grant read on the file (setfacl -m u:%d:r)",
					who, path, describe(fi), harness.UID, harness.UID, uid))
			}
		}
		if !seen {
			ws = append(ws, fmt.Sprintf("the transcript in %s will be written by the harness user (uid %d) with mode 0600, which %s cannot read (the service's ACL entry covers the directory and spill files, not a file dsh creates); run calls as uid %d to read it",
				s.TranscriptDir, harness.UID, who, harness.UID))
		}
	}
	return ws
}

// workspaceWarnings are Warnings' sentences about the workspace cwd a
// call under p mounts (writable: read-write), running as uid:gid.
func workspaceWarnings(p sandbox.Policy, cwd string, writable bool, uid, gid uint32) []string {
	var ws []string
	who := fmt.Sprintf("user %d:%d", uid, gid)
	if writable && p.Limits.WorkspaceBytes > 0 {
		if err := quota.Check(cwd); err != nil && !notExist(err) {
			ws = append(ws, fmt.Sprintf("limits.workspaceBytes cannot be enforced on the workspace (%v); the service refuses calls of this session", unwrapPathError(err)))
		}
	}
	info, err := os.Stat(cwd)
	switch {
	case notExist(err):
		ws = append(ws, fmt.Sprintf("workspace %s does not exist; a call cannot mount it", cwd))
	case err != nil:
		ws = append(ws, fmt.Sprintf("workspace %s cannot be inspected: %v", cwd, unwrapPathError(err)))
	case !info.IsDir():
		ws = append(ws, fmt.Sprintf("workspace %s is not a directory", cwd))
	case !may(info, uid, gid, permRead|permExec):
		ws = append(ws, fmt.Sprintf("%s cannot read the workspace %s (%s)", who, cwd, describe(info)))
	case writable && !may(info, uid, gid, permWrite|permExec):
		ws = append(ws, fmt.Sprintf("%s cannot write the workspace %s although the policy mounts it read-write (%s)", who, cwd, describe(info)))
	}
	return ws
}

// UserHostRoot is the policy user that runs a call as host uid 0 (gid
// 0), without a user namespace, on the backends that otherwise give every
// call one (oci with runc or crun). It is never implied: "auto" and
// "0:0" run a root-owned workspace's call as container uid 0, which is a
// mapped unprivileged host uid. Warnings and Explain flag it.
const UserHostRoot = sandbox.UserHostRoot

// HostRoot reports whether p asks for UserHostRoot.
func HostRoot(p sandbox.Policy) bool { return p.User.HostRoot() }

// The host ids a call's user namespace maps the container's ids to:
// container ids 0 … MappedIDCount-1 are host ids MappedIDBase +
// (0 … MappedIDCount-1), except the call's own uid and gid, which map to
// themselves when they are not 0. The range starts at 2^31, above every
// id a user database hands out (useradd stops at 60000, systemd's
// dynamic and container ranges end below 2^31), and is the same for
// every call and instance: calls never share files (each has its own
// /tmp and rootfs) and cannot see each other's processes (own pid
// namespace), so distinct ranges would buy nothing.
const (
	MappedIDBase  uint32 = 1 << 31
	MappedIDCount uint32 = 1 << 16
)

// IDMapping is the uid and gid map of one call's user namespace, in the
// runtime-spec's form (container id, host id, size).
type IDMapping struct {
	UIDs, GIDs []specs.LinuxIDMapping
}

// CallIDMapping returns the user namespace maps of a call that runs as
// container uid:gid (from ResolveUser): the range MappedIDBase …, with
// uid and gid mapped 1:1 when they are not 0, so that the files the call
// creates on a plain bind mount belong on the host to that uid and gid.
// uid or gid inside the mapped range is refused (it would be mapped
// twice), with an error wrapping sandbox.ErrInvalid naming "user".
func CallIDMapping(uid, gid uint32) (IDMapping, error) {
	um, err := idRanges(uid)
	if err != nil {
		return IDMapping{}, invalidf("user: uid %d: %v", uid, err)
	}
	gm, err := idRanges(gid)
	if err != nil {
		return IDMapping{}, invalidf("user: gid %d: %v", gid, err)
	}
	return IDMapping{UIDs: um, GIDs: gm}, nil
}

// idRanges is the map of MappedIDBase … with own punched out and mapped
// to itself (unless it is 0).
func idRanges(own uint32) ([]specs.LinuxIDMapping, error) {
	if own >= MappedIDBase && own-MappedIDBase < MappedIDCount {
		return nil, fmt.Errorf("lies in the range %d-%d that user namespaces map container ids to", MappedIDBase, MappedIDBase+MappedIDCount-1)
	}
	if own == 0 {
		return []specs.LinuxIDMapping{{ContainerID: 0, HostID: MappedIDBase, Size: MappedIDCount}}, nil
	}
	if own >= MappedIDCount {
		return []specs.LinuxIDMapping{
			{ContainerID: 0, HostID: MappedIDBase, Size: MappedIDCount},
			{ContainerID: own, HostID: own, Size: 1},
		}, nil
	}
	m := []specs.LinuxIDMapping{
		{ContainerID: 0, HostID: MappedIDBase, Size: own},
		{ContainerID: own, HostID: own, Size: 1},
	}
	if rest := MappedIDCount - own - 1; rest > 0 {
		m = append(m, specs.LinuxIDMapping{ContainerID: own + 1, HostID: MappedIDBase + own + 1, Size: rest})
	}
	return m, nil
}

// HostID returns the host id that m maps container id c to; ok is false
// when m does not map c.
func HostID(m []specs.LinuxIDMapping, c uint32) (host uint32, ok bool) {
	for _, e := range m {
		if c >= e.ContainerID && c-e.ContainerID < e.Size {
			return e.HostID + (c - e.ContainerID), true
		}
	}
	return 0, false
}
