package sandbox

import (
	"errors"
	"path/filepath"
	"testing"
)

func TestInstanceLocks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "instances")
	live, err := LockInstance(dir, "live")
	if err != nil {
		t.Fatalf("LockInstance(live) = %v", err)
	}
	defer live.Close()
	if _, err := LockInstance(dir, "live"); !errors.Is(err, ErrInvalid) {
		t.Errorf("LockInstance(live) again = %v, want an error wrapping ErrInvalid", err)
	}
	gone, err := LockInstance(dir, "gone")
	if err != nil {
		t.Fatalf("LockInstance(gone) = %v", err)
	}
	gone.Close() // its process "died": the file stays, the lock is gone
	for _, inst := range []string{"live", "gone"} {
		if !InstanceKnown(dir, inst) {
			t.Errorf("InstanceKnown(%q) = false, want true", inst)
		}
	}
	if InstanceKnown(dir, "never") {
		t.Errorf("InstanceKnown(never) = true, want false")
	}
	dead, release, err := LockDeadInstances(dir, "self")
	if err != nil {
		t.Fatalf("LockDeadInstances = %v", err)
	}
	if len(dead) != 1 || dead["gone"] == nil {
		t.Errorf("LockDeadInstances = %v, want only gone", dead)
	}
	// While held by the reaper, the dead instance cannot come back.
	if _, err := LockInstance(dir, "gone"); !errors.Is(err, ErrInvalid) {
		t.Errorf("LockInstance(gone) while reaped = %v, want an error wrapping ErrInvalid", err)
	}
	release()
	if dead, release, err := LockDeadInstances(filepath.Join(dir, "missing"), "self"); err != nil || len(dead) != 0 {
		t.Errorf("LockDeadInstances(missing dir) = %v, %v; want none, nil", dead, err)
	} else {
		release()
	}
}
