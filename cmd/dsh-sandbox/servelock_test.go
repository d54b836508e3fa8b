package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLockDataDir(t *testing.T) {
	dir := t.TempDir()
	first, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	lockFile := filepath.Join(dir, serveLockName)
	if data, _ := os.ReadFile(lockFile); string(data) != fmt.Sprintf("%d\n", os.Getpid()) {
		t.Errorf("lock file holds %q, want this pid", data)
	}
	// flock is per open file: a second open, as a second serve's, conflicts.
	if _, err := lockDataDir(dir); err == nil || !strings.Contains(err.Error(), lockFile) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Errorf("second lockDataDir = %v, want an error naming %s and the holder's pid", err, lockFile)
	}
	first.Close()
	again, err := lockDataDir(dir) // released: the next serve takes it
	if err != nil {
		t.Fatalf("lockDataDir after release = %v", err)
	}
	again.Close()
}
