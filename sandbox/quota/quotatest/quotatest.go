// Package quotatest makes file systems for the tests of workspace
// quotas: ext4 on a loop device, with or without project quotas.
package quotatest

import (
	"errors"
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

// LoopFS makes an ext4 file system of 64 MiB in an image in a temporary
// directory (mkfs.ext4 with the extra options opts), mounts it on a loop
// device with the mount options mopts (mount -o loop,…; the loop device
// is detached with the unmount) and returns its mount point. Everything
// is unmounted and removed when the test ends, also when it fails. When
// the kernel refuses the mount, it returns "" and the mount's error.
func LoopFS(t *testing.T, opts []string, mopts string) (string, error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("loop devices and quotas need root (this test runs as uid %d)", os.Geteuid())
	}
	for _, tool := range []string{"mkfs.ext4", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is missing (e2fsprogs, mount; scripts/setup.sh installs them): %v", tool, err)
		}
	}
	dir := t.TempDir()
	img := filepath.Join(dir, "fs.img")
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, 64<<20); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"-q", "-F"}, opts...), img)
	if out, err := exec.Command("mkfs.ext4", args...).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4 %v: %v %s", args, err, out)
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
