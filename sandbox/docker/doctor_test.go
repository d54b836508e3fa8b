package docker

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
)

// TestDoctor runs every check on a working engine with the test image:
// all pass, in order, and the test call leaves no container nor instance
// lock behind.
func TestDoctor(t *testing.T) {
	newTestExecutor(t) // the engine answers and the test image is imported
	state := t.TempDir()
	checks := Doctor(t.Context(), Options{Service: driver.Service{StateDir: state}})
	for _, c := range checks {
		t.Logf("%s ok=%v: %s", c.Name, c.OK, c.Detail)
	}
	want := []string{"daemon", "runtimes", "userns", "state", "image", "run"}
	if got := sandboxtest.CheckNames(checks); !slices.Equal(got, want) {
		t.Fatalf("Doctor() checks = %q, want %q: %+v", got, want, checks)
	}
	for _, c := range checks {
		if !c.OK {
			t.Errorf("Doctor() check %q failed: %s", c.Name, c.Detail)
		}
	}
	if d := checks[0].Detail; !strings.Contains(d, "API ") {
		t.Errorf("Doctor() daemon detail %q does not name the API version", d)
	}
	if d := checks[1].Detail; !strings.Contains(d, "runc") {
		t.Errorf("Doctor() runtimes detail %q does not list runc", d)
	}
	if e := newTestExecutor(t); e.remap.enabled() != strings.Contains(checks[2].Detail, "the engine remaps") {
		t.Errorf("Doctor() userns detail %q, but the engine's remapping is %v", checks[2].Detail, e.remap)
	}

	cli, err := newClient("")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	cs, err := cli.ContainerList(t.Context(), container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", reap.LabelOwner+"="+reap.LabelOwnerValue))})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cs {
		if strings.HasPrefix(c.Labels[reap.LabelExecution], "doctor-") {
			t.Errorf("Doctor() left container %s (call %s)", c.ID, c.Labels[reap.LabelExecution])
		}
	}
	locks, _ := filepath.Glob(filepath.Join(state, "docker-instances", "*.lock"))
	if len(locks) != 0 {
		t.Errorf("Doctor() left instance locks %q", locks)
	}
}

// TestDoctorNoEngine points Doctor at a socket where no engine listens:
// one failed "daemon" check naming the host, and nothing else.
func TestDoctorNoEngine(t *testing.T) {
	host := "unix://" + filepath.Join(t.TempDir(), "none.sock")
	checks := Doctor(context.Background(), Options{Host: host, Service: driver.Service{StateDir: t.TempDir()}})
	if len(checks) != 1 || checks[0].Name != "daemon" || checks[0].OK || !strings.Contains(checks[0].Detail, host) {
		t.Errorf("Doctor(Host %q) = %+v, want one failed daemon check naming the host", host, checks)
	}
}

// TestDoctorStateUnusable gives Doctor a state directory it cannot use:
// the state check fails and the test call is left out.
func TestDoctorStateUnusable(t *testing.T) {
	newTestExecutor(t)
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"relative/state", filepath.Join(file, "state")} {
		checks := Doctor(t.Context(), Options{Service: driver.Service{StateDir: dir}})
		want := []string{"daemon", "runtimes", "userns", "state", "image"}
		if got := sandboxtest.CheckNames(checks); !slices.Equal(got, want) {
			t.Errorf("Doctor(StateDir %q) checks = %q, want %q: %+v", dir, got, want, checks)
			continue
		}
		if checks[3].OK || !strings.Contains(checks[3].Detail, dir) {
			t.Errorf("Doctor(StateDir %q) state check = %+v, want failed, naming the directory", dir, checks[3])
		}
	}
}
