// Package quota bounds the bytes a directory tree may hold, with one of
// two mechanisms chosen by the directory's file system:
//
//   - btrfs: the directory must be the root of a subvolume and quota
//     enabled on the file system by its operator (btrfs quota enable;
//     this package never turns it on). The subvolume's qgroup (0/id)
//     gets a limit on its referenced bytes: everything the subvolume
//     holds, extents shared with a snapshot or reflinked copies
//     included, so that the bound does not move when a snapshot
//     elsewhere is deleted. The kernel reserves qgroup space at write
//     time and fails a write that would pass the limit with EDQUOT, for
//     every process, root included. A directory inside a subvolume that
//     is not its root is refused: the limit would cover the subvolume's
//     other data.
//   - ext4 made with the quota and project features, or XFS, mounted
//     with prjquota: the tree gets a project id (inherited by everything
//     created in it) and the project a hard block limit, which the
//     kernel enforces on every write of a process without
//     CAP_SYS_RESOURCE (EDQUOT). Needs a kernel with CONFIG_QFMT_V2
//     (ext4) or CONFIG_XFS_QUOTA.
//
// Any other file system, or one of these without its quota, is refused
// with an error wrapping ErrUnsupported that says what is missing.
// Check says whether a directory can be bounded; Limit sets the bound;
// Get reads it. All need root.
package quota

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's quota interface (linux/quota.h, linux/dqblk_xfs.h,
// linux/fs.h); golang.org/x/sys does not spell them.
const (
	prjQuota     = 2        // PRJQUOTA
	qSetQuota    = 0x800008 // Q_SETQUOTA
	qGetQuota    = 0x800007 // Q_GETQUOTA
	qXGetQStatV  = 0x5808   // Q_XGETQSTATV: XQM_CMD(8)
	qifBLimits   = 1        // QIF_BLIMITS
	pdqEnforced  = 1 << 5   // FS_QUOTA_PDQ_ENFD
	pdqAccounted = 1 << 4   // FS_QUOTA_PDQ_ACCT
	// FS_IOC_FSGETXATTR, FS_IOC_FSSETXATTR: _IOR/_IOW('X', 31/32,
	// struct fsxattr), and FS_XFLAG_PROJINHERIT.
	ioctlGetXattr    = 0x801c581f
	ioctlSetXattr    = 0x401c5820
	xflagProjInherit = 0x200
	// blockSize is the unit of the dqb_*limit fields (QIF_DQBLKSIZE).
	blockSize = 1024
)

// ErrUnsupported is wrapped by the errors of Check and Limit when the
// file system cannot enforce a project quota.
var ErrUnsupported = errors.New("quotas are not enforced here")

// fsxattr is struct fsxattr.
type fsxattr struct {
	XFlags, ExtSize, NExtents, ProjID, CowExtSize uint32
	_                                             [8]byte
}

// dqblk is struct if_dqblk.
type dqblk struct {
	BHardLimit, BSoftLimit, CurSpace  uint64
	IHardLimit, ISoftLimit, CurInodes uint64
	BTime, ITime                      uint64
	Valid                             uint32
	_                                 uint32
}

func quotactlFD(fd int, cmd uint32, id uint32, addr unsafe.Pointer) error {
	qcmd := cmd<<8 | prjQuota
	_, _, e := unix.Syscall6(unix.SYS_QUOTACTL_FD, uintptr(fd), uintptr(qcmd), uintptr(id), uintptr(addr), 0, 0)
	if e != 0 {
		return e
	}
	return nil
}

// Check reports whether dir can be bounded: nil when it is the root of
// a btrfs subvolume on a file system with quota enabled, or on a file
// system that enforces project quotas; else an error wrapping
// ErrUnsupported that says what is missing.
func Check(dir string) error {
	fd, btrfs, err := openFS(dir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if btrfs {
		_, _, err := btrfsCheck(fd, dir)
		return err
	}
	return check(fd, dir)
}

func check(fd int, dir string) error {
	var statv [256]byte
	statv[0] = 1 // FS_QSTATV_VERSION1
	if err := quotactlFD(fd, qXGetQStatV, 0, unsafe.Pointer(&statv[0])); err != nil {
		switch {
		case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOTTY), errors.Is(err, unix.EINVAL):
			return fmt.Errorf("%s: the file system has no quotas (%v): %w", dir, err, ErrUnsupported)
		case errors.Is(err, unix.ESRCH), errors.Is(err, unix.ENOENT):
			return fmt.Errorf("%s: quotas are not on for its file system (mount it with prjquota): %w", dir, ErrUnsupported)
		}
		return fmt.Errorf("%s: quota state: %w", dir, err)
	}
	flags := binary.LittleEndian.Uint16(statv[2:4])
	if flags&pdqAccounted == 0 || flags&pdqEnforced == 0 {
		return fmt.Errorf("%s: project quotas are not enforced on its file system (ext4 with the quota and project features, or XFS, mounted with prjquota): %w", dir, ErrUnsupported)
	}
	var x fsxattr
	if err := ioctl(fd, ioctlGetXattr, unsafe.Pointer(&x)); err != nil {
		return fmt.Errorf("%s: project ids: %v: %w", dir, err, ErrUnsupported)
	}
	return nil
}

func ioctl(fd int, req uintptr, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

// openFS opens dir (openDir) and says whether its file system is btrfs.
func openFS(dir string) (fd int, btrfs bool, err error) {
	fd, err = openDir(dir)
	if err != nil {
		return -1, false, err
	}
	if btrfs, err = isBtrfs(fd); err != nil {
		unix.Close(fd)
		return -1, false, fmt.Errorf("%s: %w", dir, err)
	}
	return fd, btrfs, nil
}

func openDir(dir string) (int, error) {
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS,
	})
	if err != nil {
		return -1, fmt.Errorf("%s: open: %w", dir, err)
	}
	return fd, nil
}

// Usage is a bound's limit and what it holds, in bytes, and which
// project (ext4, XFS) or qgroup (btrfs) carries it.
type Usage struct {
	// Project is the project id on ext4 and XFS, 0 on btrfs.
	Project uint32
	// Qgroup is the subvolume id of the btrfs qgroup 0/Qgroup, 0 on
	// ext4 and XFS.
	Qgroup     uint64
	LimitBytes int64
	UsedBytes  int64
}

// Limit bounds the tree at dir (a directory, reached without following
// links) to limit bytes in all. On btrfs it sets the referenced-bytes
// limit of the qgroup of the subvolume dir is the root of. Elsewhere it
// gives dir a project id of its own
// (its inode number, or the id it already carries with the inherit flag
// from an earlier Limit) with the inherit flag, so that everything
// created below it joins the project; the first time, it also gives the
// id to every directory and regular file already there (symbolic links,
// devices and sockets are left out; they hold no data blocks); then it
// sets the project's hard and soft block limits to limit, rounded up to
// whole KiB. A write that would take the project past the limit fails
// with EDQUOT for a process without CAP_SYS_RESOURCE. It returns the
// project's usage after the change.
func Limit(dir string, limit int64) (Usage, error) {
	if limit <= 0 {
		return Usage{}, fmt.Errorf("quota: limit %d bytes: want > 0", limit)
	}
	fd, btrfs, err := openFS(dir)
	if err != nil {
		return Usage{}, err
	}
	defer unix.Close(fd)
	if btrfs {
		return btrfsLimit(fd, dir, limit)
	}
	if err := check(fd, dir); err != nil {
		return Usage{}, err
	}
	var x fsxattr
	if err := ioctl(fd, ioctlGetXattr, unsafe.Pointer(&x)); err != nil {
		return Usage{}, fmt.Errorf("%s: project id: %w", dir, err)
	}
	id := x.ProjID
	if id == 0 || x.XFlags&xflagProjInherit == 0 {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return Usage{}, fmt.Errorf("%s: %w", dir, err)
		}
		id = uint32(st.Ino)
		if id == 0 {
			id = 1
		}
		if err := assign(dir, id); err != nil {
			return Usage{}, err
		}
	}
	blocks := uint64((limit + blockSize - 1) / blockSize)
	q := dqblk{BHardLimit: blocks, BSoftLimit: blocks, Valid: qifBLimits}
	if err := quotactlFD(fd, qSetQuota, id, unsafe.Pointer(&q)); err != nil {
		return Usage{}, fmt.Errorf("%s: set the limit of project %d: %w", dir, id, err)
	}
	return usage(fd, dir, id)
}

// Get returns the usage of the project dir belongs to, or on btrfs of
// the qgroup of the subvolume dir is the root of.
func Get(dir string) (Usage, error) {
	fd, btrfs, err := openFS(dir)
	if err != nil {
		return Usage{}, err
	}
	defer unix.Close(fd)
	if btrfs {
		id, sub, err := btrfsCheck(fd, dir)
		if err != nil {
			return Usage{}, err
		}
		return btrfsUsage(sub, dir, id)
	}
	var x fsxattr
	if err := ioctl(fd, ioctlGetXattr, unsafe.Pointer(&x)); err != nil {
		return Usage{}, fmt.Errorf("%s: project id: %w", dir, err)
	}
	return usage(fd, dir, x.ProjID)
}

func usage(fd int, dir string, id uint32) (Usage, error) {
	var q dqblk
	if err := quotactlFD(fd, qGetQuota, id, unsafe.Pointer(&q)); err != nil {
		return Usage{}, fmt.Errorf("%s: usage of project %d: %w", dir, id, err)
	}
	u := Usage{Project: id, UsedBytes: int64(q.CurSpace)}
	if q.Valid&qifBLimits != 0 {
		u.LimitBytes = int64(q.BHardLimit) * blockSize
	}
	return u, nil
}

// assign gives project id (with the inherit flag on directories) to dir
// and every directory and regular file below it. Each is opened below
// dir without following any link (RESOLVE_BENEATH, RESOLVE_NO_SYMLINKS):
// a component swapped for a link during the walk is skipped, never
// followed out of the tree.
func assign(dir string, id uint32) error {
	root, err := openDir(dir)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsDir() && !d.Type().IsRegular() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		fd, err := unix.Openat2(root, rel, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS,
		})
		if err != nil {
			if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, os.ErrNotExist) {
				return nil // swapped for a link, or gone, since the listing
			}
			return fmt.Errorf("%s: %w", p, err)
		}
		defer unix.Close(fd)
		var x fsxattr
		if err := ioctl(fd, ioctlGetXattr, unsafe.Pointer(&x)); err != nil {
			return fmt.Errorf("%s: project id: %w", p, err)
		}
		x.ProjID = id
		if d.IsDir() {
			x.XFlags |= xflagProjInherit
		}
		if err := ioctl(fd, ioctlSetXattr, unsafe.Pointer(&x)); err != nil {
			return fmt.Errorf("%s: set project id %d: %w", p, id, err)
		}
		return nil
	})
}
