package quota

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/quota/quotatest"
)

// TestBtrfsLimitEnforced: on a btrfs made on a loop device with quota
// enabled, a subvolume bounded to 8 MiB takes a write of 1 MiB and
// refuses a write of 64 MiB (with fsync) with EDQUOT ("Disk quota
// exceeded") near the limit, also in a directory made after the limit;
// a raised limit lets the write through. A directory inside the
// subvolume that is not its root is refused: a limit there would bound
// the whole subvolume.
func TestBtrfsLimitEnforced(t *testing.T) {
	mnt := quotatest.Btrfs(t, true)
	// The writes run as uid 1000, which must reach the mount point.
	for _, d := range []string{filepath.Dir(filepath.Dir(mnt)), filepath.Dir(mnt)} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	ws := filepath.Join(mnt, "ws")
	quotatest.Subvolume(t, ws)
	if err := os.Chown(ws, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := Check(ws); err != nil {
		t.Fatalf("Check(btrfs subvolume with quota) = %v, want nil", err)
	}
	const limit = 8 << 20
	u, err := Limit(ws, limit)
	if err != nil {
		t.Fatalf("Limit = %v", err)
	}
	if u.LimitBytes != limit || u.Qgroup < 256 || u.Project != 0 {
		t.Errorf("Limit = %+v, want the qgroup of a subvolume (id >= 256) with an 8 MiB limit", u)
	}
	if err := writeAs(t, 1000, 1000, filepath.Join(ws, "small"), 1<<20); err != nil {
		t.Fatalf("a write of 1 MiB under an 8 MiB limit failed: %v", err)
	}
	big := filepath.Join(ws, "big")
	if err := writeAs(t, 1000, 1000, big, 64<<20); err == nil || !strings.Contains(err.Error(), "quota") {
		t.Errorf("a write of 64 MiB past an 8 MiB limit = %v, want Disk quota exceeded (EDQUOT)", err)
	}
	fi, err := os.Stat(big)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Get(ws)
	if err != nil || got.Qgroup != u.Qgroup || got.LimitBytes != limit || got.UsedBytes > limit {
		t.Errorf("Get = %+v, %v; want qgroup 0/%d with an 8 MiB limit, at most 8 MiB referenced", got, err, u.Qgroup)
	}
	fmt.Fprintf(os.Stderr, "quota: btrfs: the 64 MiB write stopped after %d bytes; qgroup 0/%d references %d of %d bytes\n", fi.Size(), got.Qgroup, got.UsedBytes, got.LimitBytes)
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(ws, "new"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(ws, "new"), 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if err := writeAs(t, 1000, 1000, filepath.Join(ws, "new", "big"), 16<<20); err == nil || !strings.Contains(err.Error(), "quota") {
		t.Errorf("a write of 16 MiB in a new directory = %v, want Disk quota exceeded (EDQUOT)", err)
	}
	for _, dir := range []string{filepath.Join(ws, "new")} {
		if err := Check(dir); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "not the root") {
			t.Errorf("Check(%s, inside the subvolume) = %v, want ErrUnsupported saying it is not the root of one", dir, err)
		}
		if _, err := Limit(dir, limit); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Limit(%s, inside the subvolume) = %v, want ErrUnsupported", dir, err)
		}
	}
	// Limit again keeps the qgroup and changes the limit.
	if again, err := Limit(ws, 64<<20); err != nil || again.Qgroup != u.Qgroup || again.LimitBytes != 64<<20 {
		t.Errorf("Limit again = %+v, %v; want qgroup 0/%d with 64 MiB", again, err, u.Qgroup)
	}
	if err := writeAs(t, 1000, 1000, filepath.Join(ws, "new", "big"), 16<<20); err != nil {
		t.Errorf("a write of 16 MiB under a raised 64 MiB limit failed: %v", err)
	}
}

// TestBtrfsWithoutQuota: a subvolume of a btrfs without quota is refused
// (ErrUnsupported naming btrfs quota enable) and Limit does not enable
// quota behind the operator's back; once the operator enables it, the
// same subvolume is accepted.
func TestBtrfsWithoutQuota(t *testing.T) {
	mnt := quotatest.Btrfs(t, false)
	ws := filepath.Join(mnt, "ws")
	quotatest.Subvolume(t, ws)
	if err := Check(ws); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "btrfs quota enable") {
		t.Errorf("Check(btrfs without quota) = %v, want ErrUnsupported naming btrfs quota enable", err)
	}
	if _, err := Limit(ws, 1<<20); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Limit(btrfs without quota) = %v, want ErrUnsupported", err)
	}
	if err := Check(ws); !errors.Is(err, ErrUnsupported) {
		t.Errorf("Check after a refused Limit = %v: Limit turned quota on", err)
	}
	quotatest.EnableBtrfsQuota(t, mnt)
	if err := Check(ws); err != nil {
		t.Errorf("Check after btrfs quota enable = %v, want nil", err)
	}
	if u, err := Limit(ws, 1<<20); err != nil || u.LimitBytes != 1<<20 {
		t.Errorf("Limit after btrfs quota enable = %+v, %v; want a 1 MiB limit", u, err)
	}
}
