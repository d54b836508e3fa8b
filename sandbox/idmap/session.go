package idmap

import (
	"errors"
	"fmt"
	"os"

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
	attrs |= unix.MOUNT_ATTR_RDONLY
	fd, err := unix.Openat2(unix.AT_FDCWD, source, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return fmt.Errorf("staging mount of %s: open: %w", source, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("staging mount of %s: %w", source, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = os.Mkdir(target, 0o700)
	} else {
		err = os.WriteFile(target, nil, 0o600)
	}
	if err != nil {
		return fmt.Errorf("staging mount point: %w", err)
	}
	fail := func(err error) error {
		_ = os.Remove(target)
		return fmt.Errorf("staging mount of %s: %w", source, err)
	}
	if st.Uid == uid && st.Gid == gid {
		if err := MountFD(fd, target, -1, attrs); err != nil {
			return fail(err)
		}
		return nil
	}
	uids, gids := SessionMaps(st.Uid, st.Gid, uid, gid)
	ns, err := NewUserNamespace(uids, gids)
	if err != nil {
		return fail(err)
	}
	defer ns.Close()
	err = MountFD(fd, target, int(ns.Fd()), attrs)
	if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
		err = MountFD(fd, target, -1, attrs)
	}
	if err != nil {
		return fail(err)
	}
	return nil
}
