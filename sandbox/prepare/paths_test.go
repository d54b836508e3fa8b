package prepare

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/acl"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/capture"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/hostpath"
)

func TestPreparePaths(t *testing.T) {
	base := fixtures.PathTree(t)
	ws := filepath.Join(base, "ws")
	sessions := filepath.Join(base, "sessions")
	good := func() *sandbox.Request {
		r := calls.Request()
		r.Policy.Workspace = "rw"
		r.Policy.Transcript = "ro"
		r.Session.Cwd = ws
		r.Session.TranscriptDir = filepath.Join(sessions, "proj", "s1")
		r.Workdir = ""
		r.Policy.Mounts = []sandbox.Mount{{Source: ws + "/file", Target: "/ref", ReadOnly: true}}
		return r
	}
	req := good()
	call, err := Call(req, nil, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := Paths(req, call, 0); err != nil {
		t.Fatalf("Paths(legitimate) = %v", err)
	}
	if call.Workspace != ws || call.TranscriptDir != req.Session.TranscriptDir {
		t.Errorf("Paths: Workspace %q, TranscriptDir %q; want %q, %q", call.Workspace, call.TranscriptDir, ws, req.Session.TranscriptDir)
	}
	if fi, err := os.Stat(filepath.Join(req.Session.TranscriptDir, "spill")); err != nil || !fi.IsDir() {
		t.Errorf("spill directory not created: %v", err)
	}

	// The swapped session directory: replaced by a link to a host
	// directory, it is refused and nothing is written there.
	victim := filepath.Join(base, "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	swapped := filepath.Join(sessions, "proj", "s2")
	if err := os.Symlink(victim, swapped); err != nil {
		t.Fatal(err)
	}

	fifo := filepath.Join(ws, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		mutate  func(r *sandbox.Request)
		mention string
	}{
		{"cwd link to /", func(r *sandbox.Request) { r.Session.Cwd = ws + "/link-root" }, "session.cwd"},
		{"cwd link then dot-dot", func(r *sandbox.Request) { r.Session.Cwd = ws + "/link-sub/.." }, "session.cwd"},
		{"cwd /etc", func(r *sandbox.Request) { r.Session.Cwd = "/etc" }, "system directory"},
		{"cwd /", func(r *sandbox.Request) { r.Session.Cwd = "/" }, "system directory"},
		{"cwd missing", func(r *sandbox.Request) { r.Session.Cwd = ws + "/missing" }, "session.cwd"},
		{"workdir through a link", func(r *sandbox.Request) { r.Workdir = ws + "/link-root/etc" }, "workdir"},
		{"transcript dir swapped for a link", func(r *sandbox.Request) { r.Session.TranscriptDir = swapped }, "session.transcriptDir"},
		{"transcript dir below a link", func(r *sandbox.Request) { r.Session.TranscriptDir = ws + "/link-root/tmp/s" }, "session.transcriptDir"},
		{"transcript dir a system dir", func(r *sandbox.Request) { r.Session.TranscriptDir = "/etc/dsh" }, "session.transcriptDir"},
		{"transcript dir inside rw workspace", func(r *sandbox.Request) { r.Session.TranscriptDir = ws + "/.dsh/sessions/p/s" }, "session.transcriptDir"},
		{"mount source link", func(r *sandbox.Request) { r.Policy.Mounts[0].Source = ws + "/link-root" }, "policy.mounts[0].source"},
		{"rw mount of a system dir", func(r *sandbox.Request) { r.Policy.Mounts = []sandbox.Mount{{Source: "/etc", Target: "/x"}} }, "policy.mounts[0].source"},
		{"mount source a fifo", func(r *sandbox.Request) { r.Policy.Mounts[0].Source = fifo }, "policy.mounts[0].source"},
		{"mount source a device", func(r *sandbox.Request) { r.Policy.Mounts[0].Source = "/dev/null" }, "neither a directory nor a regular file"},
	}
	for _, tt := range tests {
		req := good()
		tt.mutate(req)
		call, err := Call(req, nil, nil, nil)
		if err != nil {
			t.Fatalf("Call(%s) = %v", tt.name, err)
		}
		err = Paths(req, call, 0)
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("Paths(%s) = %v, want ErrInvalid naming %q", tt.name, err, tt.mention)
		}
	}
	if entries, _ := os.ReadDir(victim); len(entries) != 0 {
		t.Errorf("the link target %s got %d entries", victim, len(entries))
	}
	if _, err := os.Lstat(ws + "/.dsh"); err == nil {
		t.Errorf("a refused transcript dir inside the workspace was created")
	}

	// Read-only workspace: a transcript dir inside it is refused too (the
	// call would read every session's transcript).
	ro := good()
	ro.Policy.Workspace, ro.Session.TranscriptDir = "ro", ws+"/sub/s"
	if call, err := Call(ro, nil, nil, nil); err != nil {
		t.Fatal(err)
	} else if err := Paths(ro, call, 0); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "session.transcriptDir") {
		t.Errorf("Paths(ro workspace holding the transcript dir) = %v, want ErrInvalid naming session.transcriptDir", err)
	}
	// An unmounted cwd is not resolved; a workdir not yet there is fine.
	for _, mutate := range []func(r *sandbox.Request){
		func(r *sandbox.Request) { r.Policy.Workspace = "none"; r.Session.Cwd = ws + "/link-root" },
		func(r *sandbox.Request) { r.Workdir = ws + "/sub/not-yet" },
	} {
		req := good()
		mutate(req)
		call, err := Call(req, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := Paths(req, call, 0); err != nil {
			t.Errorf("Paths(%+v) = %v, want nil", req.Session, err)
		}
	}
}

func TestPreparePathsExistingSessionDir(t *testing.T) {
	requireRootACL(t)
	harness := sandbox.Owner{UID: 1000, GID: 1000, Set: true}
	prepare := func(t *testing.T, td string, transcript sandbox.TranscriptMode) error {
		req := calls.Request()
		req.Session.Cwd, req.Workdir = "", ""
		req.Policy.Transcript = transcript
		req.Session.TranscriptDir = td
		req.Session.Owner = harness
		call, err := Call(req, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return Paths(req, call, 4321)
	}
	mk := func(t *testing.T, uid, gid int, perm os.FileMode) string {
		td := filepath.Join(t.TempDir(), "s1")
		if err := os.Mkdir(td, perm); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(td, uid, gid); err != nil {
			t.Fatal(err)
		}
		return td
	}

	t.Run("made by the harness", func(t *testing.T) {
		td := mk(t, 1000, 1001, 0o700)
		if err := prepare(t, td, "ro"); err != nil {
			t.Fatalf("Paths = %v", err)
		}
		if uid, gid, _ := ownerOf(t, td); uid != 1000 || gid != 1001 {
			t.Errorf("the harness's directory became %d:%d; it must not be chowned", uid, gid)
		}
		if perm, ok := readACL(t, td).NamedUser(4321); !ok || perm != acl.Read|acl.Execute {
			t.Errorf("no user:4321:r-x entry on the harness's directory")
		}
	})
	t.Run("made by the service", func(t *testing.T) {
		td := mk(t, os.Geteuid(), os.Getegid(), 0o700)
		if err := prepare(t, td, "ro"); err != nil {
			t.Fatalf("Paths = %v", err)
		}
		if uid, gid, _ := ownerOf(t, td); uid != 1000 || gid != 1000 {
			t.Errorf("the service's directory is %d:%d, want it given to 1000:1000", uid, gid)
		}
	})
	t.Run("transcript not mounted", func(t *testing.T) {
		td := mk(t, 1000, 1000, 0o700)
		if err := prepare(t, td, "none"); err != nil {
			t.Fatalf("Paths = %v", err)
		}
		if a := readACL(t, td); a != nil {
			t.Errorf("ACL %v on a directory the call does not see", a)
		}
	})
	t.Run("root harness on a user's directory", func(t *testing.T) {
		// Root acting for a user (sudo): the directory's owner stands for
		// the harness; spill files go to it, the call reads through the ACL.
		td := mk(t, 1000, 1000, 0o700)
		req := calls.Request()
		req.Session.Cwd, req.Workdir = "", ""
		req.Policy.Transcript = "ro"
		req.Session.TranscriptDir = td
		req.Session.Owner = sandbox.Owner{UID: 0, GID: 0, Set: true}
		call, err := Call(req, nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := Paths(req, call, 4321); err != nil {
			t.Fatalf("Paths = %v", err)
		}
		if want := (sandbox.Owner{UID: 1000, GID: 1000, Set: true}); call.SpillOwner != want || call.SpillReader != (sandbox.Owner{UID: 4321, Set: true}) {
			t.Errorf("SpillOwner %+v SpillReader %+v, want %+v and uid 4321", call.SpillOwner, call.SpillReader, want)
		}
		for _, d := range []string{td, filepath.Join(td, "spill")} {
			if uid, _, _ := ownerOf(t, d); uid != 1000 {
				t.Errorf("%s is owned by %d, want 1000 kept", d, uid)
			}
			if perm, ok := readACL(t, d).NamedUser(4321); !ok || perm != acl.Read|acl.Execute {
				t.Errorf("%s: no user:4321:r-x entry", d)
			}
		}
	})
	t.Run("third user", func(t *testing.T) {
		td := mk(t, 4242, 4242, 0o700)
		err := prepare(t, td, "ro")
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "session.transcriptDir") || !strings.Contains(err.Error(), "uid 4242") {
			t.Fatalf("Paths(dir of uid 4242) = %v, want ErrInvalid naming session.transcriptDir and uid 4242", err)
		}
		if a := readACL(t, td); a != nil {
			t.Errorf("the refused directory got ACL %v", a)
		}
		if _, err := os.Lstat(filepath.Join(td, "spill")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a spill directory was made in the refused directory: %v", err)
		}
	})
	t.Run("link", func(t *testing.T) {
		base := t.TempDir()
		real := mk(t, 1000, 1000, 0o700)
		td := filepath.Join(base, "s1")
		if err := os.Symlink(real, td); err != nil {
			t.Fatal(err)
		}
		if err := prepare(t, td, "ro"); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Paths(session dir is a link) = %v, want ErrInvalid", err)
		}
		if a := readACL(t, real); a != nil {
			t.Errorf("the link's target got ACL %v", a)
		}
	})
}

func TestPreparePathsOwnerCase(t *testing.T) {
	requireRootACL(t)
	harness := sandbox.Owner{UID: 1000, GID: 1000, Set: true}
	for _, callUID := range []uint32{1000, 4321, 0} {
		t.Run(fmt.Sprint("call uid ", callUID), func(t *testing.T) {
			base := t.TempDir()
			req := calls.Request()
			req.Session.Cwd, req.Workdir = "", ""
			req.Policy.Transcript = "ro"
			req.Session.TranscriptDir = filepath.Join(base, "sessions", "proj", "s1")
			req.Session.Owner = harness
			call, err := Call(req, nil, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := Paths(req, call, callUID); err != nil {
				t.Fatalf("Paths = %v", err)
			}
			for _, d := range []string{req.Session.TranscriptDir, filepath.Join(req.Session.TranscriptDir, "spill")} {
				uid, gid, _ := ownerOf(t, d)
				if uid != 1000 || gid != 1000 {
					t.Errorf("%s is owned by %d:%d, want the harness 1000:1000", d, uid, gid)
				}
				a := readACL(t, d)
				perm, has := a.NamedUser(callUID)
				switch {
				case callUID == 1000 && a != nil:
					t.Errorf("%s has ACL %v; the call runs as the harness user and needs none", d, a)
				case callUID != 1000 && (!has || perm != acl.Read|acl.Execute):
					t.Errorf("%s ACL %v: want user:%d:r-x", d, a, callUID)
				}
				if ok, _ := acl.MayAccess(d, callUID, callUID, acl.Write); ok && callUID != 1000 {
					t.Errorf("uid %d may write %s", callUID, d)
				}
				if ok, _ := acl.MayAccess(d, callUID, callUID, acl.Read|acl.Execute); !ok {
					t.Errorf("uid %d may not read %s", callUID, d)
				}
				if ok, _ := acl.MayAccess(d, 5555, 5555, acl.Read); ok {
					t.Errorf("an unrelated uid 5555 may read %s", d)
				}
			}
			// The parents we made let the harness through, and list nothing.
			if _, _, perm := ownerOf(t, filepath.Join(base, "sessions", "proj")); perm != 0o711 {
				t.Errorf("created parent mode %o, want 0711", perm)
			}
			// A spill file: the harness's, readable (not writable) by the call.
			call.SpillTotal, call.SpillMax, call.TailBytes = 1<<20, 1<<20, 4
			stdout, _ := capture.ForCall(call, base, nil, nil)
			fmt.Fprint(stdout, "more than four bytes")
			s, err := stdout.Stream()
			if err != nil || s.SpillPath == "" {
				t.Fatalf("Stream = %+v, %v; want a spill file", s, err)
			}
			if uid, gid, _ := ownerOf(t, s.SpillPath); uid != 1000 || gid != 1000 {
				t.Errorf("spill file owned by %d:%d, want 1000:1000", uid, gid)
			}
			if ok, _ := acl.MayAccess(s.SpillPath, callUID, callUID, acl.Read); !ok {
				t.Errorf("uid %d may not read its spill file", callUID)
			}
			if ok, _ := acl.MayAccess(s.SpillPath, callUID, callUID, acl.Write); ok && callUID != 1000 {
				t.Errorf("uid %d may write the spill file", callUID)
			}
			if ok, _ := acl.MayAccess(s.SpillPath, 5555, 5555, acl.Read); ok {
				t.Errorf("an unrelated uid 5555 may read the spill file")
			}
			// Another session beside it stays unreadable to the call.
			other := filepath.Join(base, "sessions", "proj", "s2")
			if _, err := hostpath.MakeSessionDir(other, harness, sandbox.Owner{}); err != nil {
				t.Fatal(err)
			}
			if ok, _ := acl.MayAccess(other, callUID, callUID, acl.Read); ok && callUID != 1000 {
				t.Errorf("uid %d may read another session's directory", callUID)
			}
		})
	}
}
