package oci

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestContainerPid: the pid file is waited for while it is missing or
// empty (crun creates it before it writes it), and not once the runtime
// has exited.
func TestContainerPid(t *testing.T) {
	for _, early := range []string{"missing", "empty"} {
		t.Run(early, func(t *testing.T) {
			s := &slot{pidFile: filepath.Join(t.TempDir(), bundlePid), done: make(chan struct{})}
			if early == "empty" {
				if err := os.WriteFile(s.pidFile, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			go func() {
				time.Sleep(30 * time.Millisecond)
				os.WriteFile(s.pidFile, []byte("4242"), 0o600)
			}()
			pid, err := s.containerPid()
			if err != nil || pid != 4242 {
				t.Errorf("containerPid() = %d, %v; want 4242", pid, err)
			}
		})
	}
	s := &slot{pidFile: filepath.Join(t.TempDir(), bundlePid), done: make(chan struct{})}
	close(s.done)
	if _, err := s.containerPid(); err == nil || !strings.Contains(err.Error(), "exited") {
		t.Errorf("containerPid() of a runtime that exited without a pid file = %v, want an error saying so", err)
	}
}
