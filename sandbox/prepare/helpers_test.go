package prepare

import (
	"fmt"
	"os"
	"syscall"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/acl"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/childenv"
)

// benchEnvInput is a realistic call: an image env, a few inherited names,
// policy env and a full snapshot.
func benchEnvInput() childenv.Input {
	return childenv.Input{
		Base:     []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/tmp", "LANG=C.UTF-8"},
		Inherit:  []string{"LANG", "TZ", "LC_ALL", "HTTP_PROXY", "OPENAI_API_KEY", "DSH_STALE"},
		Getenv:   fixtures.MapEnv("LANG=en_US.UTF-8", "TZ=UTC", "OPENAI_API_KEY=sk", "DSH_STALE=1"),
		Ordinary: []string{"GOFLAGS=-mod=mod", "CI=1", "DSH_SESSION_ID=fake"},
		Snapshot: []string{
			"DSH_HOME=/home/u/.dsh", "DSH_SESSION_ID=0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
			"DSH_SESSION_JSONL=/home/u/.dsh/sessions/--home-u-work--/0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b/session.jsonl",
			"DSH_SHELL=1",
		},
	}
}

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
