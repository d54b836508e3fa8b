package oci

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestWithRunscPidsMovesLimit(t *testing.T) {
	limit := int64(64)
	s := &specs.Spec{
		Process: &specs.Process{Rlimits: []specs.POSIXRlimit{
			{Type: "RLIMIT_NOFILE", Soft: 1024, Hard: 4096},
			{Type: "RLIMIT_NPROC", Soft: 1, Hard: 1},
		}},
		Linux: &specs.Linux{Resources: &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &limit}}},
	}
	if err := withRunscPids()(s); err != nil {
		t.Fatal(err)
	}
	want := []specs.POSIXRlimit{
		{Type: "RLIMIT_NOFILE", Soft: 1024, Hard: 4096},
		{Type: "RLIMIT_NPROC", Soft: 64, Hard: 64},
	}
	if !reflect.DeepEqual(s.Process.Rlimits, want) {
		t.Errorf("rlimits = %+v, want %+v", s.Process.Rlimits, want)
	}
	if got := *s.Linux.Resources.Pids.Limit; got != 64+runscPidsHeadroom {
		t.Errorf("host pids limit = %d, want %d", got, 64+runscPidsHeadroom)
	}
	if limit != 64 {
		t.Errorf("withRunscPids changed the caller's limit value to %d", limit)
	}
	empty := &specs.Spec{}
	if err := withRunscPids()(empty); err != nil || empty.Process != nil {
		t.Errorf("withRunscPids on a spec without limits = %v, process %+v, want nothing changed", err, empty.Process)
	}
}

func TestFindShellCases(t *testing.T) {
	withBash := t.TempDir()
	mkfile(t, filepath.Join(withBash, "usr/bin/bash"))
	mkfile(t, filepath.Join(withBash, "usr/bin/dash"))
	if err := os.Symlink("usr/bin", filepath.Join(withBash, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("dash", filepath.Join(withBash, "usr/bin/sh")); err != nil {
		t.Fatal(err)
	}
	onlySh := t.TempDir()
	mkfile(t, filepath.Join(onlySh, "bin/busybox"))
	if err := os.Symlink("busybox", filepath.Join(onlySh, "bin/sh")); err != nil {
		t.Fatal(err)
	}
	escaping := t.TempDir()
	if err := os.MkdirAll(filepath.Join(escaping, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../../../../bin/bash", filepath.Join(escaping, "bin/bash")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, root, bash string
		sh               bool
	}{
		{"merged-usr", withBash, "/bin/bash", true},
		{"busybox", onlySh, "", true},
		{"escaping-link", escaping, "", false},
		{"empty", t.TempDir(), "", false},
	} {
		bash, sh := findShell(tc.root)
		if bash != tc.bash || sh != tc.sh {
			t.Errorf("findShell(%s) = %q, %v, want %q, %v", tc.name, bash, sh, tc.bash, tc.sh)
		}
	}
}

func mkfile(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
}
