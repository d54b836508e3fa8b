package reap

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// instances makes dir with a live instance (its lock held by this
// process, on its own open file) and a dead one (a lock file nobody
// holds).
func instances(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	live, err := LockInstance(dir, "live")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { live.Close() })
	if err := os.WriteFile(filepath.Join(dir, "dead.lock"), []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestLeftoverCases(t *testing.T) {
	dir := instances(t)
	active := func(call string) bool { return call == "running" }
	s := Start("test", dir, "self", active)
	defer s.Finish()
	yes := func() bool { return true }
	no := func() bool { return false }
	for _, c := range []struct {
		inst, call string
		foreign    func() bool
		want       bool
	}{
		{"self", "running", yes, false},
		{"self", "done", nil, true},
		{"self", "", nil, true},
		{"dead", "running", nil, true},
		{"dead", "", no, true},
		{"live", "done", yes, false},
		{"unknown", "done", nil, false},
		{"unknown", "done", no, false},
		{"unknown", "done", yes, true},
		{"", "", yes, true},
	} {
		if got := s.Leftover(c.inst, c.call, c.foreign); got != c.want {
			t.Errorf("Leftover(%q, %q, foreign=%v) = %v, want %v", c.inst, c.call, c.foreign != nil, got, c.want)
		}
	}
	if !s.Dead("dead") || s.Dead("live") || s.Dead("self") || s.Dead("unknown") {
		t.Error("Dead() told the instances apart wrongly")
	}
}

func TestNilActiveKeepsSelf(t *testing.T) {
	s := Start("test", t.TempDir(), "self", nil)
	defer s.Finish()
	if s.Leftover("self", "anything", func() bool { return true }) {
		t.Error("Leftover(self) with nil active = true, want every call of self kept")
	}
}

func TestFinishRemovesDeadLocks(t *testing.T) {
	dir := instances(t)
	s := Start("test", dir, "self", nil)
	s.Removed(Containers, "dead", "c2", "c1")
	s.Removed(Containers, "self", "c0")
	s.Removed(Mounts, "", "/m")
	rep, err := s.Finish()
	if err != nil {
		t.Fatalf("Finish() = %v", err)
	}
	if !slices.Equal(rep.Instances, []string{"dead"}) || !slices.Equal(rep.Containers, []string{"c0", "c1", "c2"}) || !slices.Equal(rep.Mounts, []string{"/m"}) {
		t.Errorf("Finish() = %+v, want instance dead, containers c0 c1 c2 sorted, mount /m", rep)
	}
	if _, err := os.Stat(filepath.Join(dir, "dead.lock")); !os.IsNotExist(err) {
		t.Errorf("lock of the dead instance after Finish: %v, want removed", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "live.lock")); err != nil {
		t.Errorf("lock of the live instance after Finish: %v, want kept", err)
	}
	// Its lock released: a new sweep finds nothing dead.
	s = Start("test", dir, "self", nil)
	if rep, err := s.Finish(); err != nil || !rep.Empty() {
		t.Errorf("second sweep = %+v, %v; want nothing", rep, err)
	}
}

func TestFailureKeepsDeadInstance(t *testing.T) {
	dir := instances(t)
	s := Start("test", dir, "self", nil)
	cause := sandbox.Errorf(sandbox.ErrUnavailable, "daemon down")
	s.Fail("dead", cause)
	var called []string
	s.EachDead(Cgroups, func(inst string) ([]string, error) {
		called = append(called, inst)
		return nil, nil
	})
	rep, err := s.Finish()
	if len(called) != 0 {
		t.Errorf("EachDead visited %q after the instance failed", called)
	}
	if !errors.Is(err, sandbox.ErrInternal) || !errors.Is(err, sandbox.ErrUnavailable) || !errors.Is(err, cause) {
		t.Errorf("Finish() error = %v, want internal wrapping the unavailable cause", err)
	}
	if len(rep.Instances) != 0 {
		t.Errorf("Finish() = %+v, want no instance reaped", rep)
	}
	if _, err := os.Stat(filepath.Join(dir, "dead.lock")); err != nil {
		t.Errorf("lock of the failed dead instance: %v, want kept for a later Reap", err)
	}
	// The next sweep still sees it dead.
	s = Start("test", dir, "self", nil)
	defer s.Finish()
	if !s.Dead("dead") {
		t.Error("the failed instance is no longer dead to the next sweep")
	}
}

func TestFailAll(t *testing.T) {
	dir := instances(t)
	s := Start("test", dir, "self", nil)
	s.FailAll(errors.New("list failed"))
	rep, err := s.Finish()
	if err == nil || len(rep.Instances) != 0 {
		t.Errorf("Finish() after FailAll = %+v, %v; want an error and no instance", rep, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "dead.lock")); err != nil {
		t.Errorf("lock of the dead instance after FailAll: %v, want kept", err)
	}
}

func TestEachCall(t *testing.T) {
	dir := instances(t)
	if err := os.WriteFile(filepath.Join(dir, "dead2.lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	active := func(call string) bool { return call == "running" }
	s := Start("test", dir, "self", active)
	s.Fail("dead2", errors.New("container busy"))
	calls := []string{"running", "done"}
	got := map[string][]string{}
	s.EachCall(Files, func(inst string, keep func(string) bool) ([]string, error) {
		var removed []string
		for _, c := range calls {
			if !keep(c) {
				removed = append(removed, inst+"/"+c)
			}
		}
		got[inst] = removed
		return removed, nil
	})
	rep, _ := s.Finish()
	if !slices.Equal(got["dead"], []string{"dead/running", "dead/done"}) {
		t.Errorf("dead instance: removed %q, want every call", got["dead"])
	}
	if !slices.Equal(got["self"], []string{"self/done"}) {
		t.Errorf("this instance: removed %q, want only the call not in progress", got["self"])
	}
	if _, ok := got["dead2"]; ok {
		t.Error("EachCall visited a dead instance with a failure")
	}
	if _, ok := got["live"]; ok {
		t.Error("EachCall visited a live instance")
	}
	if want := []string{"dead/done", "dead/running", "self/done"}; !slices.Equal(rep.Files, want) {
		t.Errorf("Files = %q, want %q", rep.Files, want)
	}
}

// TestReportShape: an empty sweep still marshals every list as [].
func TestReportShape(t *testing.T) {
	rep, err := Start("test", t.TempDir(), "self", nil).Finish()
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"instances":[],"containers":[],"bundles":[],"snapshots":[],"images":[],"mounts":[],"cgroups":[],"files":[]}`
	if string(data) != want {
		t.Errorf("json = %s, want %s", data, want)
	}
}

func TestKindsCoverReport(t *testing.T) {
	s := Start("test", t.TempDir(), "self", nil)
	for k := Containers; k <= Files; k++ {
		s.Removed(k, "", "x")
	}
	rep, _ := s.Finish()
	if rep.Removed() != 7 {
		t.Errorf("one entry of each kind: Removed() = %d, want 7 (%+v)", rep.Removed(), rep)
	}
}

func TestOthersLive(t *testing.T) {
	dir := instances(t) // live and dead
	s := Start("test", dir, "self", nil)
	if !s.OthersLive() {
		t.Error("OthersLive() = false with a live instance")
	}
	s.Finish()

	alone := t.TempDir()
	if err := os.WriteFile(filepath.Join(alone, "dead.lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	self, err := LockInstance(alone, "self")
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	s = Start("test", alone, "self", nil)
	if s.OthersLive() {
		t.Error("OthersLive() = true with only this instance and a dead one")
	}
	late, err := LockInstance(alone, "late")
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	if !s.OthersLive() {
		t.Error("OthersLive() = false after a new instance locked in")
	}
	s.Finish()
	if s := Start("test", filepath.Join(alone, "missing"), "self", nil); s.OthersLive() {
		t.Error("OthersLive() = true on a missing directory")
	}
}
