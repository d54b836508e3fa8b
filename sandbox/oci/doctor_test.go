package oci

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

func TestDoctorUsable(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			requireRuntime(t, rt)
			state := testStateDir(t)
			checks := Doctor(context.Background(), Options{Runtime: rt, Service: driver.Service{StateDir: state}})
			var names []string
			for _, c := range checks {
				names = append(names, c.Name)
				if !c.OK {
					t.Errorf("Doctor(%s) check %s failed: %s", rt, c.Name, c.Detail)
				}
			}
			stubCheck := ""
			if usesStub(rt) {
				stubCheck = ",stub"
			}
			if got, want := strings.Join(names, ","), "binary,version,"+strings.Join(cveChecks, ",")+",root,cgroups,state"+stubCheck+",run"; got != want {
				t.Errorf("Doctor(%s) checks = %s, want %s", rt, got, want)
			}
			entries, _ := os.ReadDir(filepath.Join(state, "bundles"))
			locks, _ := os.ReadDir(filepath.Join(state, "instances"))
			if len(entries)+len(locks) > 0 {
				t.Errorf("Doctor(%s) left %d bundles and %d instance locks", rt, len(entries), len(locks))
			}
		})
	}
}

func TestDoctorUnusable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  Options
		check string
		want  string
	}{
		{"missing-binary", Options{Runtime: RuntimeRunc, RuntimePath: "/nonexistent/runc", Service: driver.Service{StateDir: t.TempDir()}}, "binary", "/nonexistent/runc"},
		{"unknown-runtime", Options{Runtime: "kata", Service: driver.Service{StateDir: t.TempDir()}}, "binary", "kata"},
		{"relative-state", Options{Runtime: RuntimeRunc, Service: driver.Service{StateDir: "state"}}, "state", "not an absolute path"},
		{"missing-stub", Options{Runtime: RuntimeRunc, Service: driver.Service{StateDir: t.TempDir()}, Stub: "/nonexistent/dsh-sandbox-stub"}, "stub", "/nonexistent/dsh-sandbox-stub"},
		{"dynamic-stub", Options{Runtime: RuntimeCrun, Service: driver.Service{StateDir: t.TempDir()}, Stub: "/bin/true"}, "stub", "dynamically linked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.check == "state" || tc.check == "stub" {
				requireRuntime(t, tc.opts.Runtime)
			}
			checks := Doctor(context.Background(), tc.opts)
			found := false
			for _, c := range checks {
				if c.Name == tc.check {
					found = true
					if c.OK || !strings.Contains(c.Detail, tc.want) {
						t.Errorf("Doctor check %s = %+v, want failed naming %q", c.Name, c, tc.want)
					}
				}
				if c.Name == "run" && c.OK {
					t.Errorf("Doctor ran a call although %s failed", tc.check)
				}
			}
			if !found {
				t.Errorf("Doctor = %+v, want a %s check", checks, tc.check)
			}
		})
	}
}

func TestNewUnavailableRuntime(t *testing.T) {
	_, err := New(Options{Runtime: RuntimeRunsc, RuntimePath: "/nonexistent/runsc", Service: driver.Service{StateDir: t.TempDir()}})
	if err == nil || !strings.Contains(err.Error(), "runsc") {
		t.Errorf("New with a missing runtime = %v, want an error naming runsc", err)
	}
}

func readDirNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, err
}

// cveChecks are the names of the doctor's CVE self-tests
// (idmap.CVESelfTests), in order.
var cveChecks = []string{"CVE-2019-5736", "CVE-2024-21626", "CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881", "CVE-2026-41579"}
