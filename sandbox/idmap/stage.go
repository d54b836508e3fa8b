package idmap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The one bind stager of the backends and its undo. A runtime or engine
// takes a bind's source as a path and follows links there, so no backend
// hands it a checked path: StageAt opens the source again without
// following any link and attaches a clone of what it opened at a staging
// point no call can write, which the runtime mounts instead; Unstage,
// RemoveCallDir and RemoveCallDirs take staging points down again, the
// last for Reap over an instance's directory of per-call staging
// directories (<instance>/<call id>/<point>: docker's docker-binds,
// containerd's containerd-idmap).

// Mount attaches at target (an empty directory, or an empty file
// for a file source) a non-recursive
// clone of the mount tree at source, with the id mapping of the user
// namespace usernsFD and nosuid, nodev: a file owned on disk by id k is
// seen through it as owned by the host id the namespace maps k to, and a
// file a process with host id h creates gets the on-disk owner the
// namespace maps to h. source is opened as StageAt opens it.
func Mount(source, target string, usernsFD int) error {
	dfd, _, err := openSource(source)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := MountFD(dfd, target, usernsFD, 0); err != nil {
		return fmt.Errorf("staging mount of %s: %w", source, err)
	}
	return nil
}

// openSource opens the staging source at source as an O_PATH descriptor,
// without following any link: no component may be a symbolic link or a
// magic link of /proc. What it opened must be a directory or a regular
// file (fstat; O_NOFOLLOW opens a link in the last component as the
// link, which is refused here); st is its stat.
func openSource(source string) (fd int, st unix.Stat_t, err error) {
	fd, err = unix.Openat2(unix.AT_FDCWD, source, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, st, fmt.Errorf("staging mount of %s: open: %w", source, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, st, fmt.Errorf("staging mount of %s: stat: %w", source, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR, unix.S_IFREG:
		return fd, st, nil
	case unix.S_IFLNK:
		err = errors.New("is a symbolic link")
	default:
		err = errors.New("is neither a directory nor a regular file")
	}
	unix.Close(fd)
	return -1, st, fmt.Errorf("staging mount of %s: %w", source, err)
}

// StageAt stages the bind of source at target, which must not exist: it
// opens source as openSource does (a directory or a regular file, no
// link anywhere), creates target after what it opened (an empty
// directory for a directory, an empty file for a regular file), attaches
// there the mount of the descriptor that MountFD makes (a non-recursive
// clone, nosuid and nodev with the mount attributes attrs on top,
// id-mapped through the user namespace usernsFD unless it is < 0), and
// reads the flags of the mount back (statfs), failing unless it has
// every one it asked for. The mount shows what was opened, never a link
// swapped in for source since. On failure target is unstaged again
// (Unstage); where that fails too the error says so and target stays for
// the caller's RemoveCallDir or RemoveCallDirs.
func StageAt(source, target string, usernsFD int, attrs uint64) error {
	fd, st, err := openSource(source)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		err = os.Mkdir(target, 0o700)
	} else {
		var f *os.File
		if f, err = os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err == nil {
			err = f.Close()
		}
	}
	if err != nil {
		return fmt.Errorf("staging mount point: %w", err)
	}
	err = MountFD(fd, target, usernsFD, attrs)
	if err == nil {
		err = checkFlags(target, attrs)
	}
	if err != nil {
		return errors.Join(fmt.Errorf("staging mount of %s: %w", source, err), Unstage(target))
	}
	return nil
}

// statfsFlags are the ST_* flags statfs reports for the MOUNT_ATTR_*
// attributes StageAt sets (always nosuid and nodev).
var statfsFlags = map[uint64]uint64{
	unix.MOUNT_ATTR_NOSUID: unix.ST_NOSUID, unix.MOUNT_ATTR_NODEV: unix.ST_NODEV,
	unix.MOUNT_ATTR_NOEXEC: unix.ST_NOEXEC, unix.MOUNT_ATTR_RDONLY: unix.ST_RDONLY,
}

// checkFlags fails unless the mount at p has nosuid, nodev and the flags
// of attrs (MOUNT_ATTR_NOEXEC, MOUNT_ATTR_RDONLY).
func checkFlags(p string, attrs uint64) error {
	var want uint64
	for attr, st := range statfsFlags {
		if (attrs|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)&attr != 0 {
			want |= st
		}
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(p, &sfs); err != nil {
		return fmt.Errorf("statfs: %w", err)
	}
	have := uint64(sfs.Flags)
	if missing := want &^ have; missing != 0 {
		return fmt.Errorf("the staging mount lacks flags %#x (has %#x)", missing, have)
	}
	return nil
}

// MountFD is Mount of the file or directory open at fd (an O_PATH
// descriptor is enough), with the mount attributes attrs
// (unix.MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOEXEC, …) on top of nosuid and
// nodev. With usernsFD < 0 the clone keeps the ids as they are on disk
// (no id mapping): a plain, non-recursive bind of what fd names.
func MountFD(fd int, target string, usernsFD int, attrs uint64) error {
	tfd, err := CloneFD(fd, usernsFD, attrs)
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	if err := unix.MoveMount(tfd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount to %s: %w", target, err)
	}
	return nil
}

// CloneFD is the detached mount MountFD attaches: a non-recursive clone
// of what fd names, nosuid and nodev with attrs on top, id-mapped with
// the user namespace at usernsFD unless it is < 0. The caller attaches
// it with move_mount (in any mount namespace it may enter) and closes
// it; closed unattached, it is gone.
func CloneFD(fd, usernsFD int, attrs uint64) (int, error) {
	tfd, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, fmt.Errorf("open_tree: %w", err)
	}
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV | attrs}
	if usernsFD >= 0 {
		attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
		attr.Userns_fd = uint64(usernsFD)
	}
	if err := unix.MountSetattr(tfd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		unix.Close(tfd)
		return -1, fmt.Errorf("mount_setattr: %w", err)
	}
	return tfd, nil
}

// maxStacked bounds the mounts Unstage detaches from one staging point.
const maxStacked = 64

// Unstage detaches every mount at the staging point p, one stacked on
// another included (lazily: a runtime or engine may still be letting go
// of it), and removes p. A p that is not a mount point is only removed
// and a missing one is nothing to do; one that cannot be unmounted
// stays, and so does what it shows (os.Remove never deletes a
// directory's contents). p itself is never followed if it is a link.
func Unstage(p string) error {
	for n := 0; ; n++ {
		err := unix.Unmount(p, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			break // not (or no longer) a mount point
		}
		if err != nil {
			return fmt.Errorf("staging mount %s: unmount: %w", p, err)
		}
		if n == maxStacked {
			return fmt.Errorf("staging mount %s: still mounted after %d unmounts", p, maxStacked)
		}
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("staging mount %s: %w", p, err)
	}
	return nil
}

// RemoveCallDir unstages the staging points of one call (Unstage, last
// staged first), then removes its directory dir when all of them went
// (dir must hold nothing else by then; a missing dir is no error). It
// returns the points it removed, with every failure joined.
func RemoveCallDir(dir string, points []string) ([]string, error) {
	var removed []string
	var errs []error
	for i := len(points) - 1; i >= 0; i-- {
		if err := Unstage(points[i]); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, points[i])
	}
	if len(errs) > 0 {
		return removed, errors.Join(errs...)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return removed, fmt.Errorf("staging directory %s: %w", dir, err)
	}
	return removed, nil
}

// RemoveCallDirs removes, in dir (an instance's directory of per-call
// staging directories, each named by its call id), the directory of
// every call keep reports false for: what is in it is unstaged
// (RemoveCallDir; its calls' containers must be gone). With dead (the
// instance is gone) dir itself is removed too once every call's
// directory is; a live instance's stays, as its next call may be making
// its own in it. Entries that are not directories are left alone. A
// missing dir is nothing to do. It returns the call ids whose
// directories it removed and the staging points it removed, with every
// failure joined.
func RemoveCallDirs(dir string, dead bool, keep func(callID string) bool) (calls, points []string, err error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var errs []error
	for _, ent := range entries {
		if !ent.IsDir() || keep(ent.Name()) {
			continue
		}
		call := filepath.Join(dir, ent.Name())
		inner, err := os.ReadDir(call)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		staged := make([]string, len(inner))
		for i, p := range inner {
			staged[i] = filepath.Join(call, p.Name())
		}
		removed, err := RemoveCallDir(call, staged)
		points = append(points, removed...)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		calls = append(calls, ent.Name())
	}
	if dead && len(errs) == 0 {
		if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return calls, points, errors.Join(errs...)
}
