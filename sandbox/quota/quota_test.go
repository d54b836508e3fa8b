package quota

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/quota/quotatest"
)

// writeAs writes n bytes to path as uid:gid (no capabilities, so the
// quota applies) and returns the error text of a failed write.
func writeAs(t *testing.T, uid, gid uint32, path string, n int) error {
	t.Helper()
	cmd := exec.Command("dd", "if=/dev/zero", "of="+path, "bs=4096", "count="+strconv.Itoa(n/4096), "conv=fsync")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return errors.New(strings.TrimSpace(string(out)))
	}
	return nil
}

// TestLimitEnforced: on ext4 with project quotas mounted prjquota, a
// workspace limited to 1 MiB takes a write of 512 KiB and refuses one
// that would pass the limit with EDQUOT ("Disk quota exceeded"), also
// in a subdirectory made before the limit (the walk gave it the
// project) and one made after it (inherited). On a kernel without
// CONFIG_QFMT_V2 (the CI machines' kernel), which cannot mount such a
// file system, it checks instead that Check and Limit refuse a plain
// ext4 with ErrUnsupported; the btrfs tests (btrfs_test.go) cover
// Limit there.
func TestLimitEnforced(t *testing.T) {
	mnt, err := quotatest.LoopFS(t, quotatest.ProjectQuotaMkfs, quotatest.ProjectQuotaMount)
	if err != nil {
		plain := quotatest.PlainExt4(t, err)
		if err := Check(plain); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Check(plain ext4) = %v, want ErrUnsupported", err)
		}
		if u, err := Limit(plain, 1<<20); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Limit(plain ext4) = %+v, %v; want ErrUnsupported", u, err)
		}
		return
	}
	ws := filepath.Join(mnt, "ws")
	if err := os.MkdirAll(filepath.Join(ws, "old"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{ws, filepath.Join(ws, "old")} {
		if err := os.Chown(p, 1000, 1000); err != nil {
			t.Fatal(err)
		}
	}
	if err := Check(ws); err != nil {
		t.Fatalf("Check(prjquota ext4) = %v, want nil", err)
	}
	u, err := Limit(ws, 1<<20)
	if err != nil {
		t.Fatalf("Limit = %v", err)
	}
	if u.LimitBytes != 1<<20 || u.Project == 0 {
		t.Errorf("Limit = %+v, want a project with a 1 MiB limit", u)
	}
	if err := writeAs(t, 1000, 1000, filepath.Join(ws, "small"), 512<<10); err != nil {
		t.Fatalf("a write of 512 KiB under a 1 MiB limit failed: %v", err)
	}
	if err := writeAs(t, 1000, 1000, filepath.Join(ws, "old", "big"), 2<<20); err == nil || !strings.Contains(err.Error(), "quota") {
		t.Errorf("a write of 2 MiB more = %v, want Disk quota exceeded (EDQUOT)", err)
	}
	if err := os.Mkdir(filepath.Join(ws, "new"), 0o777); err != nil {
		t.Fatal(err)
	}
	if err := writeAs(t, 1000, 1000, filepath.Join(ws, "new", "big"), 2<<20); err == nil || !strings.Contains(err.Error(), "quota") {
		t.Errorf("a write of 2 MiB in a new subdirectory = %v, want Disk quota exceeded (EDQUOT)", err)
	}
	got, err := Get(ws)
	if err != nil || got.UsedBytes > 1<<20 || got.UsedBytes < 512<<10 {
		t.Errorf("Get = %+v, %v; want between 512 KiB and 1 MiB used", got, err)
	}
	// Limit again keeps the project and changes the limit.
	if again, err := Limit(ws, 4<<20); err != nil || again.Project != u.Project || again.LimitBytes != 4<<20 {
		t.Errorf("Limit again = %+v, %v; want project %d with 4 MiB", again, err, u.Project)
	}
	if err := writeAs(t, 1000, 1000, filepath.Join(ws, "new", "big"), 2<<20); err != nil {
		t.Errorf("a write of 2 MiB under a raised 4 MiB limit failed: %v", err)
	}
}

// TestCheckWithoutQuota: ext4 without the quota features (the kernel's
// plain mount) and the test's own temporary directory do not enforce
// project quotas: Check and Limit fail with ErrUnsupported and Limit
// sets nothing.
func TestCheckWithoutQuota(t *testing.T) {
	mnt, err := quotatest.LoopFS(t, nil, "")
	if err != nil {
		t.Fatalf("mount of a plain ext4: %v", err)
	}
	for _, dir := range []string{mnt, t.TempDir()} {
		if err := Check(dir); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Check(%s) = %v, want ErrUnsupported", dir, err)
		}
		if _, err := Limit(dir, 1<<20); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Limit(%s) = %v, want ErrUnsupported", dir, err)
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil || st.Type != unix.EXT4_SUPER_MAGIC {
		t.Errorf("the loop file system is %#x, %v; want ext4", st.Type, err)
	}
	if _, err := Limit(mnt, 0); err == nil {
		t.Errorf("Limit(0) = nil error, want a refusal")
	}
}
