package quota

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel's btrfs interface (linux/btrfs.h, linux/btrfs_tree.h);
// golang.org/x/sys does not spell them.
const (
	// BTRFS_IOC_QGROUP_LIMIT: _IOR(0x94, 43, struct
	// btrfs_ioctl_qgroup_limit_args), 48 bytes.
	btrfsIocQgroupLimit = 0x8030942b
	// BTRFS_IOC_FS_INFO: _IOR(0x94, 31, struct btrfs_ioctl_fs_info_args),
	// 1024 bytes.
	btrfsIocFsInfo = 0x8400941f
	// BTRFS_IOC_INO_LOOKUP: _IOWR(0x94, 18, struct
	// btrfs_ioctl_ino_lookup_args), 4096 bytes.
	btrfsIocInoLookup = 0xd0009412
	// BTRFS_QGROUP_LIMIT_MAX_RFER: the limit is on referenced bytes.
	btrfsLimitMaxRfer = 1
	// BTRFS_FIRST_FREE_OBJECTID: the inode number of every subvolume's
	// root directory.
	btrfsSubvolRootIno = 256
)

// btrfsQgroupLimitArgs is struct btrfs_ioctl_qgroup_limit_args: the
// qgroup id (0: the subvolume of the descriptor) and struct
// btrfs_qgroup_limit.
type btrfsQgroupLimitArgs struct {
	QgroupID                                uint64
	Flags, MaxRfer, MaxExcl, RsvRfer, RsvEx uint64
}

// btrfsInoLookupArgs is struct btrfs_ioctl_ino_lookup_args.
type btrfsInoLookupArgs struct {
	TreeID, ObjectID uint64
	Name             [4080]byte
}

// isBtrfs says whether fd's file system is btrfs.
func isBtrfs(fd int) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return false, err
	}
	return uint32(st.Type) == unix.BTRFS_SUPER_MAGIC, nil
}

// btrfsQgroups is the sysfs directory of the qgroups of fd's btrfs,
// named by the file system's id (BTRFS_IOC_FS_INFO).
func btrfsQgroups(fd int) (string, error) {
	var info [1024]byte
	if err := ioctl(fd, btrfsIocFsInfo, unsafe.Pointer(&info[0])); err != nil {
		return "", fmt.Errorf("btrfs file system id: %w", err)
	}
	f := info[16:32] // fsid, after max_id and num_devices
	id := fmt.Sprintf("%x-%x-%x-%x-%x", f[0:4], f[4:6], f[6:8], f[8:10], f[10:16])
	return filepath.Join("/sys/fs/btrfs", id, "qgroups"), nil
}

// btrfsSubvolume returns the id of the subvolume whose root is fd's
// directory; a directory that is not the root of a subvolume is refused:
// a qgroup limit covers the whole subvolume, other data included.
func btrfsSubvolume(fd int, dir string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("%s: %w", dir, err)
	}
	if st.Ino != btrfsSubvolRootIno {
		return 0, fmt.Errorf("%s is a directory inside a btrfs subvolume, not the root of one: a qgroup limit would bound the whole subvolume, other data included (make the workspace a subvolume of its own: btrfs subvolume create): %w", dir, ErrUnsupported)
	}
	a := btrfsInoLookupArgs{ObjectID: btrfsSubvolRootIno}
	if err := ioctl(fd, btrfsIocInoLookup, unsafe.Pointer(&a)); err != nil {
		return 0, fmt.Errorf("%s: btrfs subvolume id: %w", dir, err)
	}
	return a.TreeID, nil
}

// btrfsCheck reports whether the btrfs subvolume root fd (dir) can be
// bounded by a qgroup: quota must be enabled on its file system (by the
// operator: btrfs quota enable; it is never turned on here) and its
// accounting consistent. It returns the subvolume's id and the sysfs
// directory of its qgroup.
func btrfsCheck(fd int, dir string) (uint64, string, error) {
	id, err := btrfsSubvolume(fd, dir)
	if err != nil {
		return 0, "", err
	}
	qg, err := btrfsQgroups(fd)
	if err != nil {
		return 0, "", fmt.Errorf("%s: %w", dir, err)
	}
	if _, err := os.Stat(qg); errors.Is(err, os.ErrNotExist) {
		return 0, "", fmt.Errorf("%s: quota is not enabled on its btrfs file system (btrfs quota enable on its mount point): %w", dir, ErrUnsupported)
	} else if err != nil {
		return 0, "", fmt.Errorf("%s: btrfs quota state: %w", dir, err)
	}
	if v, err := readSysfs(filepath.Join(qg, "enabled")); err == nil && v == 0 {
		return 0, "", fmt.Errorf("%s: quota is not enabled on its btrfs file system (btrfs quota enable on its mount point): %w", dir, ErrUnsupported)
	}
	if v, err := readSysfs(filepath.Join(qg, "inconsistent")); err == nil && v != 0 {
		return 0, "", fmt.Errorf("%s: the btrfs quota accounting is inconsistent (btrfs quota rescan -w on its mount point): %w", dir, ErrUnsupported)
	}
	sub := filepath.Join(qg, fmt.Sprintf("0_%d", id))
	if _, err := os.Stat(sub); err != nil {
		return 0, "", fmt.Errorf("%s: the qgroup 0/%d of its subvolume: %v: %w", dir, id, err, ErrUnsupported)
	}
	return id, sub, nil
}

// btrfsLimit sets the referenced-bytes limit of the qgroup of the
// subvolume root fd (dir) to limit.
func btrfsLimit(fd int, dir string, limit int64) (Usage, error) {
	id, sub, err := btrfsCheck(fd, dir)
	if err != nil {
		return Usage{}, err
	}
	a := btrfsQgroupLimitArgs{QgroupID: id, Flags: btrfsLimitMaxRfer, MaxRfer: uint64(limit)}
	if err := ioctl(fd, btrfsIocQgroupLimit, unsafe.Pointer(&a)); err != nil {
		return Usage{}, fmt.Errorf("%s: set the limit of qgroup 0/%d: %w", dir, id, err)
	}
	return btrfsUsage(sub, dir, id)
}

// btrfsUsage reads the limit and referenced bytes of qgroup 0/id from
// its sysfs directory sub.
func btrfsUsage(sub, dir string, id uint64) (Usage, error) {
	used, err := readSysfs(filepath.Join(sub, "referenced"))
	if err != nil {
		return Usage{}, fmt.Errorf("%s: usage of qgroup 0/%d: %w", dir, id, err)
	}
	max, err := readSysfs(filepath.Join(sub, "max_referenced"))
	if err != nil {
		return Usage{}, fmt.Errorf("%s: limit of qgroup 0/%d: %w", dir, id, err)
	}
	return Usage{Qgroup: id, LimitBytes: max, UsedBytes: used}, nil
}

// readSysfs reads a sysfs file holding one decimal number.
func readSysfs(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
