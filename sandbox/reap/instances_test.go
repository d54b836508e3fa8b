package reap

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestInstanceLocks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "instances")
	live, err := LockInstance(dir, "live")
	if err != nil {
		t.Fatalf("LockInstance(live) = %v", err)
	}
	defer live.Close()
	if _, err := LockInstance(dir, "live"); !errors.Is(err, sandbox.ErrInvalid) {
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
	if _, err := LockInstance(dir, "gone"); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("LockInstance(gone) while reaped = %v, want an error wrapping ErrInvalid", err)
	}
	release()
	if dead, release, err := LockDeadInstances(filepath.Join(dir, "missing"), "self"); err != nil || len(dead) != 0 {
		t.Errorf("LockDeadInstances(missing dir) = %v, %v; want none, nil", dead, err)
	} else {
		release()
	}
}

func TestActiveCalls(t *testing.T) {
	var a ActiveCalls
	if a.Has("c1") {
		t.Errorf("Has(c1) on an empty set = true")
	}
	if !a.Add("c1") || a.Add("c1") {
		t.Errorf("Add(c1) twice = want true, then false")
	}
	if !a.Has("c1") {
		t.Errorf("Has(c1) after Add = false")
	}
	a.Remove("c1")
	if a.Has("c1") || !a.Add("c1") {
		t.Errorf("after Remove(c1): Has = true or Add = false")
	}
}

func TestCheckExecutorIdentityCases(t *testing.T) {
	dir, inst, err := CheckExecutorIdentity("x", "/run//s/", "")
	if err != nil || dir != "/run/s" || !sandbox.ValidCallID(inst) || inst[:2] != "i-" {
		t.Errorf("CheckExecutorIdentity(/run//s/, \"\") = %q, %q, %v; want /run/s, a new i-… id", dir, inst, err)
	}
	if _, got, _ := CheckExecutorIdentity("x", "/s", "mine"); got != "mine" {
		t.Errorf("CheckExecutorIdentity(/s, mine) instance = %q, want mine", got)
	}
	for _, tc := range []struct{ dir, inst string }{{"", ""}, {"rel/dir", ""}, {"/s", "-bad"}, {"/s", "a/b"}} {
		if _, _, err := CheckExecutorIdentity("x", tc.dir, tc.inst); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("CheckExecutorIdentity(%q, %q) = %v, want an error wrapping ErrInvalid", tc.dir, tc.inst, err)
		}
	}
}

func TestIdleLongEnoughCases(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	g := ForeignLeftoverGrace
	for _, tt := range []struct {
		name              string
		now, created, fin time.Time
		want              bool
	}{
		{"created just now, never ran", t0.Add(time.Second), t0, time.Time{}, false},
		{"created long ago, never ran", t0.Add(g), t0, time.Time{}, true},
		{"created long ago, just exited", t0.Add(2 * g), t0, t0.Add(2*g - time.Second), false},
		{"exited long ago", t0.Add(3 * g), t0, t0.Add(g), true},
	} {
		if got := IdleLongEnough(tt.now, tt.created, tt.fin, g); got != tt.want {
			t.Errorf("IdleLongEnough(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestCheckExecutorIdentityResolvesLinks: a state directory reached
// through a symbolic link (an existing one, or a missing one below a
// link) comes back resolved; a plain one as written.
func TestCheckExecutorIdentityResolvesLinks(t *testing.T) {
	real := t.TempDir()
	link := filepath.Join(t.TempDir(), "run")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ in, want string }{
		{link, real},
		{filepath.Join(link, "dsh-sandbox", "state"), filepath.Join(real, "dsh-sandbox", "state")},
		{real, real},
	} {
		got, _, err := CheckExecutorIdentity("test", tc.in, "")
		if err != nil || got != tc.want {
			t.Errorf("CheckExecutorIdentity(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}
