package main

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/images"
)

// TestImagesBuildOutput: images build --output FILE writes a
// root-filesystem tarball holding busybox and its applet links, without
// --name and without importing it; an existing FILE is refused (exit 2,
// naming --output) and left as it was, and neither --name nor --output is
// a usage error naming --name. That the tarball imports into every
// backend is TestExamples' (integration) part.
func TestImagesBuildOutput(t *testing.T) {
	if _, err := os.Stat(images.DefaultBusyboxPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("missing in CI: %s (scripts/setup.sh installs busybox-static)", images.DefaultBusyboxPath)
		}
		t.Skipf("needs %s: apt-get install busybox-static", images.DefaultBusyboxPath)
	}
	out := filepath.Join(t.TempDir(), "rootfs.tar")
	stdout, stderr, code := run(t, "images", "build", "--output", out)
	if code != 0 || !strings.Contains(stdout, "wrote "+out) {
		t.Fatalf("images build --output: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	names := tarNames(t, out)
	for _, want := range []string{"bin/busybox", "bin/sh", "etc/passwd"} {
		if !names[want] {
			t.Errorf("the tarball lacks %s; it holds %v", want, names)
		}
	}

	before, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	_, stderr, code = run(t, "images", "build", "--output", out)
	if code != 2 || !strings.Contains(stderr, "--output") {
		t.Errorf("images build --output EXISTING: exit %d, stderr %q; want 2 naming --output", code, stderr)
	}
	if after, err := os.ReadFile(out); err != nil || string(after) != string(before) {
		t.Errorf("images build --output EXISTING changed the file (err %v)", err)
	}

	_, stderr, code = run(t, "images", "build")
	if code != 2 || !strings.Contains(stderr, "--name") {
		t.Errorf("images build without --name and --output: exit %d, stderr %q; want 2 naming --name", code, stderr)
	}
}

// tarNames is the set of entry names of the tarball file, without a
// leading "./" or trailing "/".
func tarNames(t *testing.T, file string) map[string]bool {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names := map[string]bool{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names
		}
		if err != nil {
			t.Fatal(err)
		}
		names[strings.Trim(strings.TrimPrefix(hdr.Name, "./"), "/")] = true
	}
}
