// Package quotatest makes file systems for the tests of workspace
// quotas on loop devices: ext4, with or without project quotas, and
// btrfs, with or without quota (qgroups).
package quotatest

import (
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ProjectQuotaMkfs are the mkfs.ext4 options of a file system with
// project quotas, which LoopFS mounts with ProjectQuotaMount.
var ProjectQuotaMkfs = []string{"-O", "quota,project", "-E", "quotatype=prjquota"}

// ProjectQuotaMount is the mount option that enforces project quotas.
const ProjectQuotaMount = "prjquota"

// KernelHasProjectQuota reports whether the running kernel was built
// with the quota format ext4 needs for project quotas (CONFIG_QFMT_V2,
// read from /proc/config.gz); without /proc/config.gz it reports true,
// so that a mount that fails there fails its test.
func KernelHasProjectQuota(t *testing.T) bool {
	t.Helper()
	f, err := os.Open("/proc/config.gz")
	if err != nil {
		return true
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("/proc/config.gz: %v", err)
	}
	config, err := io.ReadAll(z)
	if err != nil {
		t.Fatalf("/proc/config.gz: %v", err)
	}
	return bytes.Contains(config, []byte("\nCONFIG_QFMT_V2=y"))
}

// PlainExt4 is what a test of project quotas checks instead when
// LoopFS could not mount ext4 with them (mountErr): on a kernel without
// CONFIG_QFMT_V2 it returns the mount point of a plain ext4 made by
// LoopFS, on which quotas must be refused; on a kernel with it, the
// failed mount fails the test.
func PlainExt4(t *testing.T, mountErr error) string {
	t.Helper()
	if KernelHasProjectQuota(t) {
		t.Fatalf("the kernel has CONFIG_QFMT_V2, yet ext4 with project quotas does not mount: %v", mountErr)
	}
	t.Logf("this kernel lacks CONFIG_QFMT_V2 (%v): checking the refusal on a plain ext4", mountErr)
	mnt, err := LoopFS(t, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	return mnt
}

// LoopFS makes an ext4 file system of 64 MiB in an image in a temporary
// directory (mkfs.ext4 with the extra options opts), mounts it on a loop
// device with the mount options mopts (mount -o loop,…; the loop device
// is detached with the unmount) and returns its mount point. Everything
// is unmounted and removed when the test ends, also when it fails. When
// the kernel refuses the mount, it returns "" and the mount's error.
func LoopFS(t *testing.T, opts []string, mopts string) (string, error) {
	t.Helper()
	return loopMount(t, "mkfs.ext4", append([]string{"-q", "-F"}, opts...), 64<<20, mopts)
}

// Btrfs makes a btrfs file system of 256 MiB (sparse) on a loop device
// like LoopFS, with quota enabled (EnableBtrfsQuota) when quota is
// true, and returns its mount point; everything is unmounted and
// removed when the test ends.
func Btrfs(t *testing.T, quota bool) string {
	t.Helper()
	needTools(t, "mkfs.btrfs", "btrfs")
	mnt, err := loopMount(t, "mkfs.btrfs", []string{"-q", "-f"}, 256<<20, "")
	if err != nil {
		t.Fatalf("mount of a btrfs on a loop device: %v", err)
	}
	if quota {
		EnableBtrfsQuota(t, mnt)
	}
	return mnt
}

// EnableBtrfsQuota enables quota on the btrfs at mnt as an operator
// would: btrfs quota enable, then btrfs quota rescan -w, which waits
// for the first accounting to finish (until then the accounting is
// inconsistent and package quota refuses the file system).
func EnableBtrfsQuota(t *testing.T, mnt string) {
	t.Helper()
	for _, args := range [][]string{{"quota", "enable", mnt}, {"quota", "rescan", "-w", mnt}} {
		if out, err := exec.Command("btrfs", args...).CombinedOutput(); err != nil {
			t.Fatalf("btrfs %v: %v %s", args, err, out)
		}
	}
}

// Subvolume creates the btrfs subvolume path (btrfs subvolume create).
func Subvolume(t *testing.T, path string) {
	t.Helper()
	if out, err := exec.Command("btrfs", "subvolume", "create", path).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume create %s: %v %s", path, err, out)
	}
}

func needTools(t *testing.T, tools ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("loop devices and quotas need root (this test runs as uid %d)", os.Geteuid())
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing (e2fsprogs, btrfs-progs, mount; scripts/setup.sh installs them): %v", tool, err)
		}
	}
}

// loopMount makes a file system with mkfs args on a sparse image of size
// bytes in a temporary directory and mounts it with mopts.
func loopMount(t *testing.T, mkfs string, args []string, size int64, mopts string) (string, error) {
	t.Helper()
	needTools(t, mkfs, "mount", "umount")
	dir := t.TempDir()
	img := filepath.Join(dir, "fs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	args = append(args, img)
	if out, err := exec.Command(mkfs, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v %s", mkfs, args, err, out)
	}
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	o := "loop"
	if mopts != "" {
		o += "," + mopts
	}
	out, err := exec.Command("mount", "-o", o, img, mnt).CombinedOutput()
	if err != nil {
		return "", errors.New(strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
		}
	})
	return mnt, nil
}
