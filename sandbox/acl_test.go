package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
)

// u is the ACL entry of a named user or group; o of an owner, owning
// group, mask or other.
func u(tag ACLTag, id uint32, perm uint16) ACLEntry { return ACLEntry{Tag: tag, Perm: perm, ID: id} }
func o(tag ACLTag, perm uint16) ACLEntry            { return ACLEntry{Tag: tag, Perm: perm, ID: aclUndefinedID} }

func TestACLEncodeRoundTrip(t *testing.T) {
	tests := []ACL{
		ACLFromMode(0o700),
		ACLFromMode(0o640),
		{o(ACLUserObj, 7), u(ACLUser, 1000, 5), u(ACLUser, 4321, 4), o(ACLGroupObj, 0), u(ACLGroup, 50, 1), o(ACLMask, 5), o(ACLOther, 0)},
	}
	for _, a := range tests {
		b := a.Encode()
		if len(b) != 4+8*len(a) {
			t.Errorf("Encode(%v) is %d bytes, want %d", a, len(b), 4+8*len(a))
		}
		got, err := ParseACL(b)
		if err != nil || !reflect.DeepEqual(got, a) {
			t.Errorf("ParseACL(Encode(%v)) = %v, %v; want it back", a, got, err)
		}
	}
	// The kernel's layout, byte for byte: version 2, then {tag, perm, id}.
	want := []byte{2, 0, 0, 0, 1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff, 2, 0, 4, 0, 0xe8, 0x03, 0, 0}
	if got := (ACL{u(ACLUser, 1000, 4), o(ACLUserObj, 6)}).Encode(); string(got) != string(want) {
		t.Errorf("Encode = % x, want % x (sorted, little-endian)", got, want)
	}
}

func TestParseACLHostile(t *testing.T) {
	good := ACLFromMode(0o700).Encode()
	badVersion := append([]byte{}, good...)
	badVersion[0] = 3
	badTag := append([]byte{}, good...)
	badTag[4] = 0x40
	badPerm := append([]byte{}, good...)
	badPerm[6] = 8
	for name, b := range map[string][]byte{
		"empty":     nil,
		"version 3": badVersion,
		"truncated": good[:len(good)-1],
		"tag 0x40":  badTag,
		"perm 010":  badPerm,
	} {
		if _, err := ParseACL(b); !errors.Is(err, ErrInvalid) {
			t.Errorf("ParseACL(%s) = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := ParseACL(good); err != nil {
		t.Errorf("ParseACL(legitimate) = %v", err)
	}
}

func TestACLWithUserCase(t *testing.T) {
	tests := []struct {
		name string
		in   ACL
		uid  uint32
		perm uint16
		want ACL
	}{
		{"minimal 0700", ACLFromMode(0o700), 1000, 5,
			ACL{o(ACLUserObj, 7), u(ACLUser, 1000, 5), o(ACLGroupObj, 0), o(ACLMask, 5), o(ACLOther, 0)}},
		{"mask covers the owning group", ACLFromMode(0o750), 1000, 4,
			ACL{o(ACLUserObj, 7), u(ACLUser, 1000, 4), o(ACLGroupObj, 5), o(ACLMask, 5), o(ACLOther, 0)}},
		{"existing entry keeps its bits", ACL{o(ACLUserObj, 7), u(ACLUser, 1000, 2), o(ACLGroupObj, 0), o(ACLMask, 2), o(ACLOther, 0)}, 1000, 4,
			ACL{o(ACLUserObj, 7), u(ACLUser, 1000, 6), o(ACLGroupObj, 0), o(ACLMask, 6), o(ACLOther, 0)}},
		{"narrow mask only gains perm", ACL{o(ACLUserObj, 7), u(ACLUser, 7, 7), o(ACLGroupObj, 0), o(ACLMask, 0), o(ACLOther, 0)}, 1000, 4,
			ACL{o(ACLUserObj, 7), u(ACLUser, 7, 7), u(ACLUser, 1000, 4), o(ACLGroupObj, 0), o(ACLMask, 4), o(ACLOther, 0)}},
	}
	for _, tt := range tests {
		if got := tt.in.WithUser(tt.uid, tt.perm); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: WithUser(%d, %o) = %v, want %v", tt.name, tt.uid, tt.perm, got, tt.want)
		}
	}
}

func TestACLPermitsCase(t *testing.T) {
	a := ACL{o(ACLUserObj, 6), u(ACLUser, 1000, 6), o(ACLGroupObj, 6), u(ACLGroup, 50, 4), o(ACLMask, 4), o(ACLOther, 0)}
	tests := []struct {
		uid, gid uint32
		want     uint16
		ok       bool
	}{
		{7, 7, ACLRead | ACLWrite, true},     // owner
		{1000, 9, ACLRead, true},             // named user
		{1000, 9, ACLWrite, false},           // masked
		{9, 8, ACLRead, true},                // owning group, masked to r
		{9, 8, ACLWrite, false},              // owning group's w is masked
		{9, 50, ACLRead, true},               // named group
		{9, 9, ACLRead, false},               // other
		{0, 0, ACLRead, false},               // uid 0 without capabilities
		{1000, 8, ACLRead | ACLWrite, false}, // a named user does not fall through to its group
	}
	for _, tt := range tests {
		if got := a.Permits(7, 8, tt.uid, tt.gid, tt.want); got != tt.ok {
			t.Errorf("Permits(owner 7:8, %d:%d, %o) = %v, want %v", tt.uid, tt.gid, tt.want, got, tt.ok)
		}
	}
}

// readACL reads the access ACL attribute of path without getfacl.
func readACL(t *testing.T, path string) ACL {
	t.Helper()
	buf := make([]byte, 512)
	n, err := syscall.Getxattr(path, aclXattr, buf)
	if errors.Is(err, syscall.ENODATA) {
		return nil
	}
	if err != nil {
		t.Fatalf("getxattr %s: %v", path, err)
	}
	a, err := ParseACL(buf[:n])
	if err != nil {
		t.Fatalf("ParseACL(%s) = %v", path, err)
	}
	return a
}

// userEntry is the named-user entry of uid in a, if any.
func userEntry(a ACL, uid uint32) (uint16, bool) {
	for _, e := range a {
		if e.Tag == ACLUser && e.ID == uid {
			return e.Perm, true
		}
	}
	return 0, false
}

func TestGrantUserOnDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := grantUser(f, uint32(os.Geteuid()), 4321, ACLRead); errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("the test directory's file system has no POSIX ACLs: %v", err)
	} else if err != nil {
		t.Fatalf("grantUser = %v", err)
	}
	want := ACL{o(ACLUserObj, 6), u(ACLUser, 4321, 4), o(ACLGroupObj, 0), o(ACLMask, 4), o(ACLOther, 0)}
	if got := readACL(t, path); !reflect.DeepEqual(got, want) {
		t.Errorf("ACL after grantUser = %v, want %v", got, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode after grantUser = %v, %v; want 0640 (the group bits show the mask)", fi.Mode(), err)
	}
	// Granting again writes nothing new.
	if err := grantUser(f, uint32(os.Geteuid()), 4321, ACLRead); err != nil {
		t.Fatal(err)
	}
	if got := readACL(t, path); !reflect.DeepEqual(got, want) {
		t.Errorf("ACL after a second grantUser = %v, want %v", got, want)
	}
	for _, tt := range []struct {
		uid  uint32
		want uint16
		ok   bool
	}{{4321, ACLRead, true}, {4321, ACLWrite, false}, {4322, ACLRead, false}} {
		if ok, err := MayAccess(path, tt.uid, tt.uid, tt.want); err != nil || ok != tt.ok {
			t.Errorf("MayAccess(%d, %o) = %v, %v; want %v", tt.uid, tt.want, ok, err, tt.ok)
		}
	}
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

func TestPreparePathsOwnerCase(t *testing.T) {
	requireRootACL(t)
	harness := Owner{UID: 1000, GID: 1000, Set: true}
	for _, callUID := range []uint32{1000, 4321, 0} {
		t.Run(fmt.Sprint("call uid ", callUID), func(t *testing.T) {
			base := t.TempDir()
			req := testRequest()
			req.Session.Cwd, req.Workdir = "", ""
			req.Policy.Transcript = "ro"
			req.Session.TranscriptDir = filepath.Join(base, "sessions", "proj", "s1")
			req.Session.Owner = harness
			call, err := Prepare(req, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := PreparePaths(req, call, callUID); err != nil {
				t.Fatalf("PreparePaths = %v", err)
			}
			for _, d := range []string{req.Session.TranscriptDir, filepath.Join(req.Session.TranscriptDir, "spill")} {
				uid, gid, _ := ownerOf(t, d)
				if uid != 1000 || gid != 1000 {
					t.Errorf("%s is owned by %d:%d, want the harness 1000:1000", d, uid, gid)
				}
				a := readACL(t, d)
				perm, has := userEntry(a, callUID)
				switch {
				case callUID == 1000 && a != nil:
					t.Errorf("%s has ACL %v; the call runs as the harness user and needs none", d, a)
				case callUID != 1000 && (!has || perm != ACLRead|ACLExecute):
					t.Errorf("%s ACL %v: want user:%d:r-x", d, a, callUID)
				}
				if ok, _ := MayAccess(d, callUID, callUID, ACLWrite); ok && callUID != 1000 {
					t.Errorf("uid %d may write %s", callUID, d)
				}
				if ok, _ := MayAccess(d, callUID, callUID, ACLRead|ACLExecute); !ok {
					t.Errorf("uid %d may not read %s", callUID, d)
				}
				if ok, _ := MayAccess(d, 5555, 5555, ACLRead); ok {
					t.Errorf("an unrelated uid 5555 may read %s", d)
				}
			}
			// The parents we made let the harness through, and list nothing.
			if _, _, perm := ownerOf(t, filepath.Join(base, "sessions", "proj")); perm != 0o711 {
				t.Errorf("created parent mode %o, want 0711", perm)
			}
			// A spill file: the harness's, readable (not writable) by the call.
			call.SpillTotal, call.SpillMax, call.TailBytes = 1<<20, 1<<20, 4
			stdout, _ := call.Captures(base, nil, nil)
			fmt.Fprint(stdout, "more than four bytes")
			s, err := stdout.Stream()
			if err != nil || s.SpillPath == "" {
				t.Fatalf("Stream = %+v, %v; want a spill file", s, err)
			}
			if uid, gid, _ := ownerOf(t, s.SpillPath); uid != 1000 || gid != 1000 {
				t.Errorf("spill file owned by %d:%d, want 1000:1000", uid, gid)
			}
			if ok, _ := MayAccess(s.SpillPath, callUID, callUID, ACLRead); !ok {
				t.Errorf("uid %d may not read its spill file", callUID)
			}
			if ok, _ := MayAccess(s.SpillPath, callUID, callUID, ACLWrite); ok && callUID != 1000 {
				t.Errorf("uid %d may write the spill file", callUID)
			}
			if ok, _ := MayAccess(s.SpillPath, 5555, 5555, ACLRead); ok {
				t.Errorf("an unrelated uid 5555 may read the spill file")
			}
			// Another session beside it stays unreadable to the call.
			other := filepath.Join(base, "sessions", "proj", "s2")
			if _, err := MakeSessionDir(other, harness, Owner{}); err != nil {
				t.Fatal(err)
			}
			if ok, _ := MayAccess(other, callUID, callUID, ACLRead); ok && callUID != 1000 {
				t.Errorf("uid %d may read another session's directory", callUID)
			}
		})
	}
}

func TestPreparePathsExistingSessionDir(t *testing.T) {
	requireRootACL(t)
	harness := Owner{UID: 1000, GID: 1000, Set: true}
	prepare := func(t *testing.T, td string, transcript TranscriptMode) error {
		req := testRequest()
		req.Session.Cwd, req.Workdir = "", ""
		req.Policy.Transcript = transcript
		req.Session.TranscriptDir = td
		req.Session.Owner = harness
		call, err := Prepare(req, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return PreparePaths(req, call, 4321)
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
			t.Fatalf("PreparePaths = %v", err)
		}
		if uid, gid, _ := ownerOf(t, td); uid != 1000 || gid != 1001 {
			t.Errorf("the harness's directory became %d:%d; it must not be chowned", uid, gid)
		}
		if perm, ok := userEntry(readACL(t, td), 4321); !ok || perm != ACLRead|ACLExecute {
			t.Errorf("no user:4321:r-x entry on the harness's directory")
		}
	})
	t.Run("made by the service", func(t *testing.T) {
		td := mk(t, os.Geteuid(), os.Getegid(), 0o700)
		if err := prepare(t, td, "ro"); err != nil {
			t.Fatalf("PreparePaths = %v", err)
		}
		if uid, gid, _ := ownerOf(t, td); uid != 1000 || gid != 1000 {
			t.Errorf("the service's directory is %d:%d, want it given to 1000:1000", uid, gid)
		}
	})
	t.Run("transcript not mounted", func(t *testing.T) {
		td := mk(t, 1000, 1000, 0o700)
		if err := prepare(t, td, "none"); err != nil {
			t.Fatalf("PreparePaths = %v", err)
		}
		if a := readACL(t, td); a != nil {
			t.Errorf("ACL %v on a directory the call does not see", a)
		}
	})
	t.Run("root harness on a user's directory", func(t *testing.T) {
		// Root acting for a user (sudo): the directory's owner stands for
		// the harness; spill files go to it, the call reads through the ACL.
		td := mk(t, 1000, 1000, 0o700)
		req := testRequest()
		req.Session.Cwd, req.Workdir = "", ""
		req.Policy.Transcript = "ro"
		req.Session.TranscriptDir = td
		req.Session.Owner = Owner{UID: 0, GID: 0, Set: true}
		call, err := Prepare(req, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := PreparePaths(req, call, 4321); err != nil {
			t.Fatalf("PreparePaths = %v", err)
		}
		if want := (Owner{UID: 1000, GID: 1000, Set: true}); call.SpillOwner != want || call.SpillReader != (Owner{UID: 4321, Set: true}) {
			t.Errorf("SpillOwner %+v SpillReader %+v, want %+v and uid 4321", call.SpillOwner, call.SpillReader, want)
		}
		for _, d := range []string{td, filepath.Join(td, "spill")} {
			if uid, _, _ := ownerOf(t, d); uid != 1000 {
				t.Errorf("%s is owned by %d, want 1000 kept", d, uid)
			}
			if perm, ok := userEntry(readACL(t, d), 4321); !ok || perm != ACLRead|ACLExecute {
				t.Errorf("%s: no user:4321:r-x entry", d)
			}
		}
	})
	t.Run("third user", func(t *testing.T) {
		td := mk(t, 4242, 4242, 0o700)
		err := prepare(t, td, "ro")
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "session.transcriptDir") || !strings.Contains(err.Error(), "uid 4242") {
			t.Fatalf("PreparePaths(dir of uid 4242) = %v, want ErrInvalid naming session.transcriptDir and uid 4242", err)
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
		if err := prepare(t, td, "ro"); !errors.Is(err, ErrInvalid) {
			t.Errorf("PreparePaths(session dir is a link) = %v, want ErrInvalid", err)
		}
		if a := readACL(t, real); a != nil {
			t.Errorf("the link's target got ACL %v", a)
		}
	})
}
