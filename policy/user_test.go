package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// ownedDir makes a directory with the given mode, owned by uid:gid when
// the test runs as root, else by the test's own user; it returns the
// directory and its owner.
func ownedDir(t *testing.T, parent, name string, mode os.FileMode, uid, gid int) (string, uint32, uint32) {
	t.Helper()
	dir := filepath.Join(parent, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
		return dir, uint32(uid), uint32(gid)
	}
	return dir, uint32(os.Getuid()), uint32(os.Getgid())
}

func TestResolveUserCase(t *testing.T) {
	tmp := t.TempDir()
	ws, wsUID, wsGID := ownedDir(t, tmp, "ws", 0o755, 4242, 4343)
	root, rootUID, rootGID := ownedDir(t, tmp, "sessions", 0o700, 4244, 4345)
	file := filepath.Join(tmp, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	auto := builtin(t, WorkspaceWrite)
	fixed := auto
	fixed.User = "1234:5678"

	tests := []struct {
		name     string
		p        sandbox.Policy
		s        sandbox.Session
		uid, gid uint32
	}{
		{"fixed user ignores the session", fixed, sandbox.Session{Cwd: ws}, 1234, 5678},
		{"owner of cwd", auto, sandbox.Session{Cwd: ws, TranscriptDir: filepath.Join(root, "p", "s")}, wsUID, wsGID},
		{"missing cwd falls to sessions root", auto, sandbox.Session{Cwd: filepath.Join(tmp, "gone"), TranscriptDir: filepath.Join(root, "--p--", "s1")}, rootUID, rootGID},
		{"existing transcript dir", auto, sandbox.Session{TranscriptDir: root}, rootUID, rootGID},
		{"no session", auto, sandbox.Session{}, 65534, 65534},
		{"only / exists", auto, sandbox.Session{TranscriptDir: "/nonexistent-dsh-sandbox-test/a/b"}, 65534, 65534},
		{"missing cwd, no transcript", auto, sandbox.Session{Cwd: "/nonexistent-dsh-sandbox-test"}, 65534, 65534},
	}
	for _, tt := range tests {
		uid, gid, err := ResolveUser(tt.p, tt.s)
		if err != nil || uid != tt.uid || gid != tt.gid {
			t.Errorf("%s: ResolveUser(%s, %+v) = %d, %d, %v, want %d, %d, nil", tt.name, tt.p.User, tt.s, uid, gid, err, tt.uid, tt.gid)
		}
	}

	bad := auto
	bad.User = "root"
	for _, tt := range []struct {
		p    sandbox.Policy
		s    sandbox.Session
		want string
	}{
		{bad, sandbox.Session{}, `user: "root" is not allowed`},
		{auto, sandbox.Session{Cwd: "rel"}, `session.cwd: "rel" is not an absolute path`},
		{auto, sandbox.Session{TranscriptDir: "rel/s"}, `session.transcriptDir: "rel/s" is not an absolute path`},
	} {
		_, _, err := ResolveUser(tt.p, tt.s)
		if err == nil || !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ResolveUser(%s, %+v) error = %v, want an invalid-argument error containing %q", tt.p.User, tt.s, err, tt.want)
		}
	}
}

// sessionDir copies a real dsh transcript into a fresh session directory
// with the given modes.
func sessionDir(t *testing.T, dirMode, fileMode os.FileMode) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(fixtures.DSHSessions(t), "turns.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "--work-p--", "s1")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "session.jsonl")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(os.Chmod(path, fileMode), os.Chmod(dir, dirMode)); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestWarningsCase(t *testing.T) {
	me, myGID := uint32(os.Getuid()), uint32(os.Getgid())
	other := me + 4000
	otherGID := myGID + 4000
	private := sessionDir(t, 0o700, 0o600)
	openDir := sessionDir(t, 0o755, 0o600)
	shared := sessionDir(t, 0o750, 0o640)
	readable := sessionDir(t, 0o755, 0o644)
	tmp := t.TempDir()
	wsOpen, _, _ := ownedDir(t, tmp, "open", 0o755, os.Getuid(), os.Getgid())
	wsShared, _, _ := ownedDir(t, tmp, "shared", 0o775, os.Getuid(), os.Getgid())
	wsPrivate, _, _ := ownedDir(t, tmp, "private", 0o700, os.Getuid(), os.Getgid())
	ww := builtin(t, WorkspaceWrite)
	ro := builtin(t, ReadOnly)
	noTranscript := ww
	noTranscript.Transcript = "none"
	// The local backend mounts nothing id-mapped: the transcript
	// warnings are its.
	local := ww
	local.Backend = sandbox.BackendLocal
	containerd, docker := ww, ww
	containerd.Backend, docker.Backend = sandbox.BackendContainerd, sandbox.BackendDocker

	tests := []struct {
		name     string
		p        sandbox.Policy
		s        sandbox.Session
		uid, gid uint32
		want     []string // one substring per expected warning, in order
	}{
		{"owner reads everything", ww, sandbox.Session{Cwd: wsPrivate, TranscriptDir: private}, me, myGID, nil},
		// The service lets the call read the directory (an ACL entry), not
		// the 0600 file dsh writes as the harness user.
		{"other user, private transcript dir", local, sandbox.Session{TranscriptDir: private}, other, otherGID, []string{"cannot read the transcript " + filepath.Join(private, "session.jsonl") + " (owner"}},
		{"other user, private transcript file mode", local, sandbox.Session{TranscriptDir: openDir}, other, otherGID, []string{"mode 0600)"}},
		{"other user, private transcript file", local, sandbox.Session{TranscriptDir: openDir}, other, otherGID, []string{"cannot read the transcript " + filepath.Join(openDir, "session.jsonl") + " (owner"}},
		{"group member reads shared transcript", ww, sandbox.Session{TranscriptDir: shared}, other, myGID, nil},
		{"other user, readable transcript", ww, sandbox.Session{TranscriptDir: readable}, other, otherGID, nil},
		{"transcript not mounted", noTranscript, sandbox.Session{TranscriptDir: private}, other, otherGID, nil},
		{"other user, rw workspace 0755", ww, sandbox.Session{Cwd: wsOpen}, other, otherGID, []string{"cannot write the workspace " + wsOpen}},
		{"other user, ro workspace 0755", ro, sandbox.Session{Cwd: wsOpen}, other, otherGID, nil},
		{"group writes shared workspace", ww, sandbox.Session{Cwd: wsShared}, other, myGID, nil},
		{"other user, private workspace", ro, sandbox.Session{Cwd: wsPrivate}, other, otherGID, []string{"cannot read the workspace " + wsPrivate}},
		{"missing workspace", ww, sandbox.Session{Cwd: filepath.Join(tmp, "gone")}, me, myGID, []string{"workspace " + filepath.Join(tmp, "gone") + " does not exist"}},
		{"missing transcript dir, other user", local, sandbox.Session{TranscriptDir: filepath.Join(tmp, "s9")}, other, otherGID, []string{"will be written by the harness user (uid " + fmt.Sprint(me) + ") with mode 0600"}},
		{"missing transcript dir, service user", ww, sandbox.Session{TranscriptDir: filepath.Join(tmp, "s9")}, me, myGID, nil},
		{"both unreadable", local, sandbox.Session{Cwd: wsPrivate, TranscriptDir: private}, other, otherGID, []string{"cannot read the transcript", "workspace"}},
		{"other user, private transcript, id-mapped (oci)", ww, sandbox.Session{TranscriptDir: private}, other, otherGID, nil},
		{"other user, private transcript, id-mapped (containerd)", containerd, sandbox.Session{TranscriptDir: openDir}, other, otherGID, nil},
		{"missing transcript dir, other user, id-mapped (docker)", docker, sandbox.Session{TranscriptDir: filepath.Join(tmp, "s9")}, other, otherGID, nil},
		{"harness is the call's user", ww, sandbox.Session{TranscriptDir: private, Owner: sandbox.Owner{UID: other, GID: otherGID, Set: true}}, other, otherGID, nil},
	}
	for _, tt := range tests {
		got := Warnings(tt.p, tt.s, tt.uid, tt.gid)
		if len(got) != len(tt.want) {
			t.Errorf("%s: Warnings(%s, %+v, %d, %d) = %q, want %d warnings containing %q", tt.name, tt.p.Name, tt.s, tt.uid, tt.gid, got, len(tt.want), tt.want)
			continue
		}
		for i, w := range tt.want {
			if !strings.Contains(got[i], w) {
				t.Errorf("%s: Warnings(…)[%d] = %q, want it to contain %q", tt.name, i, got[i], w)
			}
		}
	}
}

func TestWarningsThirdUserTranscriptDir(t *testing.T) {
	if os.Geteuid() != 0 {
		missing := fmt.Sprintf("giving a directory to another user needs root (running as uid %d)", os.Geteuid())
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but %s", missing)
		}
		t.Skip(missing)
	}
	ww := builtin(t, WorkspaceWrite)
	dir := sessionDir(t, 0o755, 0o644)
	if err := os.Chown(dir, 4321, 4321); err != nil {
		t.Fatal(err)
	}
	got := Warnings(ww, sandbox.Session{TranscriptDir: dir, Owner: sandbox.Owner{UID: 1000, GID: 1000, Set: true}}, 1000, 1000)
	if len(got) != 1 || !strings.Contains(got[0], "belongs to uid 4321, neither the harness user (uid 1000)") {
		t.Errorf("Warnings(dir of uid 4321, harness 1000) = %q, want one warning that it belongs to uid 4321", got)
	}
	// Root acting for the directory's owner (sudo) is no third user.
	if got := Warnings(ww, sandbox.Session{TranscriptDir: dir, Owner: sandbox.Owner{UID: 0, GID: 0, Set: true}}, 4321, 4321); got != nil {
		t.Errorf("Warnings(dir of uid 4321, root harness) = %q, want none", got)
	}
	// The legitimate variant: the harness owns it.
	if err := os.Chown(dir, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if got := Warnings(ww, sandbox.Session{TranscriptDir: dir, Owner: sandbox.Owner{UID: 1000, GID: 1000, Set: true}}, 1000, 1000); got != nil {
		t.Errorf("Warnings(dir of the harness uid 1000) = %q, want none", got)
	}
}
