package oci

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// bundleIdmap is the directory of a bundle that holds its id-mapped
// staging mounts, one numbered mount point per mapped bind.
const bundleIdmap = "idmap"

// newUserNamespace returns an open file of a new user namespace with the
// given uid and gid maps, which no process is left in: it creates a child
// in that namespace (os.ForkExec of this binary, traced so that it stops
// at its exec and never runs a line of it), opens /proc/<pid>/ns/user,
// kills and reaps the child. The file keeps the namespace alive until it
// is closed. The caller must be root.
func newUserNamespace(uids, gids []specs.LinuxIDMapping) (*os.File, error) {
	// The tracer of the child is the thread that forked it: stay on it
	// until the child is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	attr := &syscall.ProcAttr{
		Env: []string{},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: sysIDMap(uids),
			GidMappings: sysIDMap(gids),
			Ptrace:      true,
			Pdeathsig:   syscall.SIGKILL,
		},
	}
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"dsh-sandbox-userns"}, attr)
	if err != nil {
		return nil, fmt.Errorf("user namespace: create: %w", err)
	}
	f, oerr := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/user")
	_ = unix.Kill(pid, unix.SIGKILL)
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || ws.Exited() || ws.Signaled() {
			break
		}
	}
	if oerr != nil {
		return nil, fmt.Errorf("user namespace: %w", oerr)
	}
	return f, nil
}

func sysIDMap(m []specs.LinuxIDMapping) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, len(m))
	for i, e := range m {
		out[i] = syscall.SysProcIDMap{ContainerID: int(e.ContainerID), HostID: int(e.HostID), Size: int(e.Size)}
	}
	return out
}

// idmapMount attaches at target (an empty directory, or an empty file
// for a file source) a non-recursive
// clone of the mount tree at source, with the id mapping of the user
// namespace usernsFD and nosuid, nodev: a file owned on disk by id k is
// seen through it as owned by the host id the namespace maps k to, and a
// file a process with host id h creates gets the on-disk owner the
// namespace maps to h. source is opened without following any link (it
// is the path sandbox.PreparePaths resolved).
func idmapMount(source, target string, usernsFD int) error {
	dfd, err := unix.Openat2(unix.AT_FDCWD, source, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return fmt.Errorf("id-mapped mount of %s: open: %w", source, err)
	}
	defer unix.Close(dfd)
	tfd, err := unix.OpenTree(dfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("id-mapped mount of %s: open_tree: %w", source, err)
	}
	defer unix.Close(tfd)
	attr := &unix.MountAttr{
		Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
		Userns_fd: uint64(usernsFD),
	}
	if err := unix.MountSetattr(tfd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("id-mapped mount of %s: mount_setattr: %w", source, err)
	}
	if err := unix.MoveMount(tfd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("id-mapped mount of %s: move_mount to %s: %w", source, target, err)
	}
	return nil
}

// stageIdmapped replaces the source of every bind mount in spec whose
// destination is in dests by an id-mapped staging mount of that source
// in the bundle, with the call's id maps: the runtime then bind-mounts
// the staging mount, and the bind keeps the mapping. The staging mounts
// are made in the runtime's mount namespace and recorded in b, whose
// unmount removes them.
func (b *bundle) stageIdmapped(spec *specs.Spec, dests map[string]bool) error {
	if len(dests) == 0 {
		return nil
	}
	l := spec.Linux
	if l == nil || len(l.UIDMappings) == 0 || len(l.GIDMappings) == 0 {
		return fmt.Errorf("id-mapped mounts: the spec has no user namespace mappings")
	}
	ns, err := newUserNamespace(l.UIDMappings, l.GIDMappings)
	if err != nil {
		return err
	}
	defer ns.Close()
	dir := b.path(bundleIdmap)
	if err := os.Mkdir(dir, 0o711); err != nil {
		return fmt.Errorf("id-mapped mounts: %w", err)
	}
	for i := range spec.Mounts {
		m := &spec.Mounts[i]
		if m.Type != "bind" || !dests[filepath.Clean(m.Destination)] {
			continue
		}
		target := filepath.Join(dir, strconv.Itoa(len(b.staged)))
		if fi, err := os.Lstat(m.Source); err == nil && !fi.IsDir() {
			err = os.WriteFile(target, nil, 0o600)
			if err != nil {
				return fmt.Errorf("id-mapped mounts: %w", err)
			}
		} else if err := os.Mkdir(target, 0o700); err != nil {
			return fmt.Errorf("id-mapped mounts: %w", err)
		}
		source := m.Source
		if err := b.inNamespace(func() error { return idmapMount(source, target, int(ns.Fd())) }); err != nil {
			return err
		}
		b.staged = append(b.staged, target)
		m.Source = target
	}
	return nil
}

// callIDs is how a call's identity is mapped to the host.
type callIDs struct {
	// enabled: the call gets a user namespace with mapping.
	enabled bool
	mapping policy.IDMapping
	// idmapped: the workspace, the session directory and the policy's
	// bind mounts are staged as id-mapped mounts (the call runs as
	// container uid 0, a mapped unprivileged host uid, and reads and
	// writes them as on-disk uid 0).
	idmapped bool
	// hostUID is the host uid the call's processes have.
	hostUID uint32
	// diskUID is the uid the call's file accesses are checked against on
	// the binds of the call: hostUID, or the container uid (0) when the
	// binds are id-mapped. PreparePaths grants it read on the session
	// directory.
	diskUID uint32
	// rootUID and rootGID are the host ids of the container's root.
	rootUID, rootGID uint32
}

// userNamespace decides the user namespace of a call of policy p running
// as container uid:gid. runc and crun always give one, unless the policy
// says user: host-root; runsc gets none (gVisor runs the call's
// processes under its own kernel, see docs/identity.md).
func (e *Executor) userNamespace(p sandbox.Policy, uid, gid uint32) (callIDs, error) {
	if policy.HostRoot(p) || !e.rt.usernsCapable() {
		return callIDs{hostUID: uid, diskUID: uid}, nil
	}
	m, err := policy.CallIDMapping(uid, gid)
	if err != nil {
		return callIDs{}, err
	}
	host, ok := policy.HostID(m.UIDs, uid)
	if !ok || host == 0 {
		return callIDs{}, sandbox.Errorf(sandbox.ErrInternal, "oci: user %d:%d: no unprivileged host uid in the map", uid, gid)
	}
	rootUID, _ := policy.HostID(m.UIDs, 0)
	rootGID, _ := policy.HostID(m.GIDs, 0)
	ids := callIDs{enabled: true, mapping: m, idmapped: uid == 0, hostUID: host, diskUID: host, rootUID: rootUID, rootGID: rootGID}
	if ids.idmapped {
		ids.diskUID = uid
	}
	return ids, nil
}

// idmappedDests are the destinations of the binds an id-mapped call
// stages: the workspace, the session directory and the policy's mounts.
// Through them the call (container uid 0, host uid MappedIDBase) has the
// on-disk identity uid 0, exactly the permissions a call running as host
// uid 0 without capabilities had, and nothing more.
func idmappedDests(req *sandbox.Request) map[string]bool {
	d := map[string]bool{}
	if req.Policy.Workspace != "none" && req.Session.Cwd != "" {
		d[filepath.Clean(req.Session.Cwd)] = true
	}
	if req.Policy.Transcript == "ro" && req.Session.TranscriptDir != "" {
		d[filepath.Clean(req.Session.TranscriptDir)] = true
	}
	for _, m := range req.Policy.Mounts {
		d[filepath.Clean(m.Target)] = true
	}
	return d
}

// usernsCapable reports whether the runtime runs calls in a user
// namespace with mapped ids (runc and crun; not runsc).
func (r *runtimeCLI) usernsCapable() bool { return r.name != RuntimeRunsc }

// searchable checks that others may search every ancestor of stateDir:
// the unprivileged host uid a user namespace maps the container's root
// to walks through them to a bundle's rootfs, which runc and crun mount
// from inside the namespace (New makes stateDir and its bundles
// directory 0711 itself). One that is not is an error naming it; the
// service does not change modes of directories it does not own.
func searchable(stateDir string) error {
	for d := filepath.Dir(stateDir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s (an ancestor of %s) is mode %04o: calls run in user namespaces, whose mapped root must search it; make it searchable by others (chmod o+x %s) or choose another state directory", d, stateDir, fi.Mode().Perm(), d)
		}
		if d == "/" {
			return nil
		}
	}
}

// ownRootfs gives the rootfs of the bundle to the host uid:gid the call's
// user namespace maps container root to, so that the runtime, which
// creates the remaining mount points (/dev, …) from inside the
// namespace, may write there; the root is read-only to the call
// afterwards. The host skeleton is given whole (directories and
// symbolic links the executor made); of an overlay only the root
// directory (a copy-up into the call's upper layer; the image is not
// touched).
func (b *bundle) ownRootfs(uid, gid uint32, overlay bool) error {
	root := b.path(bundleRootfs)
	if overlay {
		return b.inNamespace(func() error { return os.Lchown(root, int(uid), int(gid)) })
	}
	return filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(gid))
	})
}
