package images

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"strings"
	"testing"
)

// TestBusyboxWith: the combined image holds busybox's shell and each
// added host program.
func TestBusyboxWith(t *testing.T) {
	if _, err := os.Stat(DefaultBusyboxPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but busybox-static is missing: %v", err)
		}
		t.Skipf("needs busybox-static: %v", err)
	}
	var buf bytes.Buffer
	if err := BusyboxWith(&buf, "bash"); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names[strings.TrimPrefix(h.Name, "./")] = true
	}
	for _, want := range []string{"bin/sh", "bin/bash"} {
		if !names[want] {
			t.Errorf("BusyboxWith(bash) has no %s", want)
		}
	}
}
