package idmap

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// TestCheckRootfs refuses a rootfs whose /dev, /proc or a mount
// destination's component is a symbolic link, and accepts links below a
// tmpfs mount (hidden) and a rootfs of real directories.
func TestCheckRootfs(t *testing.T) {
	mounts := []specs.Mount{{Destination: "/dev", Type: "tmpfs"}, {Destination: "/proc", Type: "proc"}, {Destination: "/srv/ws", Type: "bind"}}
	for _, c := range []struct {
		name, link, target string
		refused            bool
	}{
		{"clean", "", "", false},
		{"dev", "dev", "/tmp", true},
		{"proc", "proc", "/tmp", true},
		{"bind parent", "srv", "/etc", true},
		{"relative dev", "dev", "../../..", true},
		{"dev/null below the /dev tmpfs", "dev/null", "/proc/sys/kernel/core_pattern", false},
		{"elsewhere", "opt", "/etc", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			for _, d := range []string{"dev", "proc", "sys", "srv/ws", "opt"} {
				if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if c.link != "" {
				p := filepath.Join(root, c.link)
				if err := os.RemoveAll(p); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(c.target, p); err != nil {
					t.Fatal(err)
				}
			}
			err := CheckRootfs(root, mounts)
			if c.refused && (err == nil || !strings.Contains(err.Error(), "/"+c.link+" is a symbolic link")) {
				t.Errorf("CheckRootfs = %v, want a refusal naming /%s", err, c.link)
			}
			if !c.refused && err != nil {
				t.Errorf("CheckRootfs = %v, want nil", err)
			}
		})
	}
}

// TestCVESelfTests: on this machine (root, the runtimes installed by
// scripts/setup.sh) every self-test passes, one per CVE; a runtime
// binary others may write fails its check.
func TestCVESelfTests(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "runc")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(bin, 0, 0); err != nil {
		t.Skipf("chown to root needs root: %v", err)
	}
	checks := CVESelfTests(bin)
	var names []string
	for _, c := range checks {
		names = append(names, c.Name)
		if !c.OK {
			t.Errorf("%s: %s", c.Name, c.Detail)
		}
	}
	want := []string{"CVE-2019-5736", "CVE-2024-21626", "CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881", "CVE-2026-41579"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Errorf("self-tests %v, want %v", names, want)
	}
	if err := os.Chmod(bin, 0o777); err != nil {
		t.Fatal(err)
	}
	if c := CVESelfTests(bin)[0]; c.OK {
		t.Errorf("a world-writable runtime binary: %s ok, want it failed", c.Name)
	}
}
