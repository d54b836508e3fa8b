package idmap

import (
	"errors"
	"fmt"
	"os"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
)

// CallHostIDs are the host uid and gid of the process spec runs: its
// user mapped through the spec's user namespace maps, or the user itself
// without a user namespace (user: host-root).
func CallHostIDs(spec *specs.Spec) (uid, gid uint32, err error) {
	if spec.Process == nil {
		return 0, 0, fmt.Errorf("the spec has no process")
	}
	uid, gid = spec.Process.User.UID, spec.Process.User.GID
	l := spec.Linux
	if l == nil || len(l.UIDMappings) == 0 {
		return uid, gid, nil
	}
	hu, uok := policy.HostID(l.UIDMappings, uid)
	hg, gok := policy.HostID(l.GIDMappings, gid)
	if !uok || !gok {
		return 0, 0, fmt.Errorf("the call's user %d:%d is not mapped by its user namespace", uid, gid)
	}
	return hu, hg, nil
}

// SessionMaps are the id maps of the mount of a session directory owned
// on disk by ownerUID:ownerGID (the harness user) for a call whose
// processes have host ids uid:gid: the owner is the call, nothing else is
// mapped (every other on-disk id is seen as the overflow id, 65534, so
// that it grants the call only what it grants others).
func SessionMaps(ownerUID, ownerGID, uid, gid uint32) (uids, gids []specs.LinuxIDMapping) {
	return []specs.LinuxIDMapping{{ContainerID: ownerUID, HostID: uid, Size: 1}},
		[]specs.LinuxIDMapping{{ContainerID: ownerGID, HostID: gid, Size: 1}}
}

// maxNamespaces bounds the user namespaces namespaceFor keeps open for
// reuse (one open file each).
const maxNamespaces = 64

// namespaces are the user namespaces made so far for id-mapped mounts,
// by their maps: a namespace only carries maps, so one serves every
// mount with the same maps, and making one (a traced child) is most of
// the cost of an id-mapped mount. The session directory's maps differ
// by owner and call ids (SessionMaps); those of a call in a user
// namespace are its spec's, the same for every call of a policy.
var namespaces struct {
	sync.Mutex
	m map[string]*os.File
}

// namespaceFor returns a user namespace with the maps uids and gids,
// kept for reuse while fewer than maxNamespaces are; release closes one
// that is not kept.
func namespaceFor(uids, gids []specs.LinuxIDMapping) (ns *os.File, release func(), err error) {
	key := fmt.Sprint(uids, gids)
	namespaces.Lock()
	defer namespaces.Unlock()
	if ns := namespaces.m[key]; ns != nil {
		return ns, func() {}, nil
	}
	if ns, err = NewUserNamespace(uids, gids); err != nil {
		return nil, nil, err
	}
	if len(namespaces.m) >= maxNamespaces {
		return ns, func() { ns.Close() }, nil
	}
	if namespaces.m == nil {
		namespaces.m = map[string]*os.File{}
	}
	namespaces.m[key] = ns
	return ns, func() {}, nil
}

// StageSession creates target (an empty directory, or an empty file when
// source is not a directory) and attaches there a read-only,
// non-recursive clone of the session directory at source (opened without
// following any link) through which its on-disk owner, the harness user,
// is the host uid:gid of the call (SessionMaps): the call reads the
// transcript dsh writes with mode 0600, and the spill files, as their
// owner whatever their modes and ACLs give others, and cannot write,
// rename, replace or chmod any of them (EROFS). The mount is read-only,
// nosuid and nodev whatever attrs says, with attrs (noexec) on top.
// When the owner already is uid:gid the clone is not id-mapped. A file
// system that cannot be id-mapped (EINVAL, EOPNOTSUPP: no FS_ALLOW_IDMAP)
// gets the plain read-only clone: the call then reads what the modes
// and the service's ACL entries let its uid read (docs/identity.md). On
// failure target is removed again.
func StageSession(source, target string, uid, gid uint32, attrs uint64) error {
	tfd, dir, err := SessionClone(source, uid, gid, attrs)
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	if dir {
		err = os.Mkdir(target, 0o700)
	} else {
		err = os.WriteFile(target, nil, 0o600)
	}
	if err != nil {
		return fmt.Errorf("staging mount point: %w", err)
	}
	if err := unix.MoveMount(tfd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		_ = os.Remove(target)
		return fmt.Errorf("staging mount of %s: move_mount to %s: %w", source, target, err)
	}
	return nil
}

// SessionClone is the mount StageSession attaches, detached: the caller
// attaches it with move_mount and closes it. dir says whether source is
// a directory.
func SessionClone(source string, uid, gid uint32, attrs uint64) (tfd int, dir bool, err error) {
	attrs |= unix.MOUNT_ATTR_RDONLY
	fd, st, err := openSource(source)
	if err != nil {
		return -1, false, err
	}
	defer unix.Close(fd)
	dir = st.Mode&unix.S_IFMT == unix.S_IFDIR
	fail := func(err error) (int, bool, error) {
		return -1, false, fmt.Errorf("staging mount of %s: %w", source, err)
	}
	if st.Uid == uid && st.Gid == gid {
		if tfd, err = CloneFD(fd, -1, attrs); err != nil {
			return fail(err)
		}
		return tfd, dir, nil
	}
	ns, release, err := namespaceFor(SessionMaps(st.Uid, st.Gid, uid, gid))
	if err != nil {
		return fail(err)
	}
	defer release()
	tfd, err = CloneFD(fd, int(ns.Fd()), attrs)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
		tfd, err = CloneFD(fd, -1, attrs)
	}
	if err != nil {
		return fail(err)
	}
	return tfd, dir, nil
}
