package containerd

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
)

// TestDoctorPassesCases runs Doctor against the test daemon with the
// test image imported: every check passes, and the test call leaves no
// container, snapshot, instance lock file or cgroup behind.
func TestDoctorPassesCases(t *testing.T) {
	e := newTestExecutor(t)
	state := t.TempDir()
	before, err := e.cli.Containers(e.ctx(t.Context()))
	if err != nil {
		t.Fatalf("Containers() = %v", err)
	}
	checks := Doctor(t.Context(), Options{Address: e.opts.Address, Namespace: e.opts.Namespace, Service: driver.Service{StateDir: state}})
	want := append(append([]string{"daemon", "namespace", "snapshotter", "shim", "runtime"}, cveChecks...), "state", "image", "run")
	if got := sandboxtest.CheckNames(checks); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("Doctor() check names = %q, want %q", got, want)
	}
	for _, c := range checks {
		if !c.OK {
			t.Errorf("Doctor() check %q failed: %s", c.Name, c.Detail)
		}
	}
	after, err := e.cli.Containers(e.ctx(t.Context()))
	if err != nil {
		t.Fatalf("Containers() = %v", err)
	}
	if len(after) != len(before) {
		t.Errorf("containers after Doctor() = %d, want %d as before", len(after), len(before))
	}
	if ents, _ := os.ReadDir(filepath.Join(state, "containerd-instances")); len(ents) != 0 {
		t.Errorf("instance lock files after Doctor() = %d (first %q), want none", len(ents), ents[0].Name())
	}
	if insts := cgroupInstances(); len(insts) > 1 || (len(insts) == 1 && insts[0] != e.instance) {
		t.Errorf("cgroup instance directories after Doctor() = %q, want at most the test executor's", insts)
	}
}

// TestDoctorFailsCases: no daemon ends the checks at "daemon"; a
// namespace without an imported image fails "image" with the import
// command and does not run the test call.
func TestDoctorFailsCases(t *testing.T) {
	dir := t.TempDir()
	checks := Doctor(context.Background(), Options{Address: filepath.Join(dir, "no.sock"), Service: driver.Service{StateDir: dir}})
	if len(checks) != 1 || checks[0].Name != "daemon" || checks[0].OK {
		t.Errorf("Doctor(no daemon) = %+v, want one failed %q check", checks, "daemon")
	}

	addr := testAddress(t)
	checks = Doctor(t.Context(), Options{Address: addr, Namespace: "dsh-sandbox-test-empty", Service: driver.Service{StateDir: dir}})
	byName := map[string]doctor.Check{}
	for _, c := range checks {
		byName[c.Name] = c
	}
	if c := byName["image"]; c.OK || !strings.Contains(c.Detail, "dsh-sandbox images import --backend containerd FILE --name N") {
		t.Errorf("Doctor(empty namespace) image check = %+v, want failed, naming the import command", c)
	}
	if c, ok := byName["run"]; !ok || c.OK {
		t.Errorf("Doctor(empty namespace) run check = %+v, want failed (not run)", c)
	}
	if c := byName["daemon"]; !c.OK {
		t.Errorf("Doctor(empty namespace) daemon check = %+v, want ok", c)
	}
}

// cveChecks are the names of the doctor's CVE self-tests
// (idmap.CVESelfTests), in order.
var cveChecks = []string{"CVE-2019-5736", "CVE-2024-21626", "CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881", "CVE-2026-41579"}
