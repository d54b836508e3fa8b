package idmap

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/prepare"
)

// CVESelfTests are `dsh-sandbox doctor`'s self-tests of the layers that
// contain the published runtime escapes integration/cve_test.go runs on
// every backend, one check per CVE, named by it. They exercise
// dsh-sandbox's own code (the request validation, the bundle check, the
// base spec) and the runtime binary at runtimePath on the host; they run
// no container (the doctor's "run" check does). A check that fails
// means the layer is missing here.
func CVESelfTests(runtimePath string) []doctor.Check {
	var checks []doctor.Check
	add := func(name string, err error, ok string) {
		c := doctor.Check{Name: name, OK: err == nil, Detail: ok}
		if err != nil {
			c.Detail = err.Error()
		}
		checks = append(checks, c)
	}
	add("CVE-2019-5736", binaryNotWritable(runtimePath),
		fmt.Sprintf("contained: %s belongs to root and no other uid may write it, and no call runs as host root (user namespace; user: host-root excepted)", runtimePath))
	add("CVE-2024-21626", workdirRefused(),
		"contained: a workdir in /proc (a leaked descriptor's /proc/self/fd/N) is refused before anything runs")
	dev := rootfsRefused("dev")
	add("CVE-2025-31133", devTmpfs(),
		"contained: /dev is a fresh tmpfs that hides an image's /dev/null link, and procfs writes come from an unprivileged host uid")
	add("CVE-2025-52565", devTmpfs(),
		"contained: /dev is a fresh tmpfs that hides an image's /dev/console link, and procfs writes come from an unprivileged host uid")
	add("CVE-2025-52881", rootfsRefused("proc"), "refused: an image whose /proc is a symbolic link is not run")
	add("CVE-2026-41579", dev, "refused: an image whose /dev is a symbolic link is not run")
	return checks
}

func binaryNotWritable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || st.Uid != 0 || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("%s is mode %04o, owner %d: another uid may write the runtime binary", path, fi.Mode().Perm(), st.Uid)
	}
	return nil
}

func workdirRefused() error {
	p, _ := policy.Builtin(policy.ReadOnly)
	req := &sandbox.Request{Command: "true", Workdir: "/tmp", Policy: p}
	if err := prepare.Validate(req); err != nil {
		return fmt.Errorf("the self-test's request with workdir /tmp is refused: %v", err)
	}
	req.Workdir = "/proc/self/fd/7"
	if err := prepare.Validate(req); err == nil || !strings.Contains(err.Error(), "workdir") {
		return fmt.Errorf("a request with workdir /proc/self/fd/7 passed validation (%v)", err)
	}
	return nil
}

func devTmpfs() error {
	s := policy.BaseSpec("rootfs", nil)
	if !slices.ContainsFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == "/dev" && m.Type == "tmpfs" }) {
		return fmt.Errorf("the base spec mounts no tmpfs on /dev")
	}
	return nil
}

// rootfsRefused makes a rootfs in a temporary directory whose name is a
// symbolic link and checks that CheckRootfs refuses it.
func rootfsRefused(name string) error {
	dir, err := os.MkdirTemp("", "dsh-sandbox-doctor-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.Symlink(dir, filepath.Join(dir, name)); err != nil {
		return err
	}
	if err := CheckRootfs(dir, nil); err == nil {
		return fmt.Errorf("a rootfs whose /%s is a symbolic link passed the bundle check", name)
	}
	return nil
}
