package doctor

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestStateDirNamesFileSystem: the state check passes on a tmpfs and says
// so, and a state directory elsewhere is named by its file system with
// the cost of not being on a tmpfs.
func TestStateDirNamesFileSystem(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("mounting a tmpfs needs root")
		}
		t.Skip("mounting a tmpfs needs root")
	}
	mnt := t.TempDir()
	if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(mnt, syscall.MNT_DETACH); err != nil {
			t.Error(err)
		}
	})
	c := StateDir(filepath.Join(mnt, "state"))
	if !c.OK || !strings.HasSuffix(c.Detail, "is writable, on tmpfs") {
		t.Errorf("state on a tmpfs: %+v, want it passed, ending \"is writable, on tmpfs\"", c)
	}

	// procfs stands for any other file system: fileSystem only reads it.
	got := fileSystem("/proc")
	if want := "on a file system of type 0x9fa0, not tmpfs"; !strings.HasPrefix(got, want) {
		t.Errorf("fileSystem(/proc) = %q, want it to begin %q", got, want)
	}
	if got := fileSystem(filepath.Join(mnt, "missing")); !strings.HasPrefix(got, "file system unknown: ") {
		t.Errorf("fileSystem(missing) = %q, want it unknown with the error", got)
	}
}
