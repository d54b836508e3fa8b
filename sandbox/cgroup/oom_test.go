package cgroup

import (
	"os"
	"path/filepath"
	"testing"
)

func TestOOMKillCountCases(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		content string
		want    uint64
	}{
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3}, // cgroup v1 memory.oom_control
		{"low 0\nhigh 0\nmax 12\noom 1\noom_kill 1\n", 1},    // cgroup v2 memory.events
		{"oom_kill_disable 0\nunder_oom 0\n", 0},             // a kernel without the count
		{"oom_kill x\n", 0},
	} {
		f := filepath.Join(dir, "f")
		if err := os.WriteFile(f, []byte(tc.content), 0o644); err != nil {
			t.Fatal(err)
		}
		if got := oomKillCount(f); got != tc.want {
			t.Errorf("oomKillCount(%q) = %d, want %d", tc.content, got, tc.want)
		}
	}
	if got := oomKillCount(filepath.Join(dir, "missing")); got != 0 {
		t.Errorf("oomKillCount(missing file) = %d, want 0", got)
	}
}

func TestOOMKilledReadsEveryDir(t *testing.T) {
	quiet, killed := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(quiet, "memory.oom_control"), []byte("oom_kill 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(killed, "memory.events"), []byte("oom 1\noom_kill 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if OOMKilled([]string{quiet}) {
		t.Errorf("OOMKilled(a cgroup with oom_kill 0) = true, want false")
	}
	if !OOMKilled([]string{quiet, killed}) {
		t.Errorf("OOMKilled(one cgroup with oom_kill 2) = false, want true")
	}
}
