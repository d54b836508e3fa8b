package prepare

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/acl"
)

// ownerOf is the uid, gid and permission bits of path.
func ownerOf(t *testing.T, path string) (uint32, uint32, os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid, fi.Mode().Perm()
}

// readACL reads the access ACL attribute of path without getfacl.
func readACL(t *testing.T, path string) acl.ACL {
	t.Helper()
	return fixtures.Xattr(t, path, "system.posix_acl_access", acl.Parse)
}

// requireRootACL skips (never under CI=true) when the test cannot give
// files to other users.
func requireRootACL(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing := fmt.Sprintf("giving the session directory to the harness user needs root (running as uid %d)", os.Geteuid())
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s", missing)
		}
		t.Skip(missing)
	}
}
