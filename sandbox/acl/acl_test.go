package acl

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"syscall"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// u is the ACL entry of a named user or group; o of an owner, owning
// group, mask or other.
func u(tag Tag, id uint32, perm uint16) Entry { return Entry{Tag: tag, Perm: perm, ID: id} }
func o(tag Tag, perm uint16) Entry            { return Entry{Tag: tag, Perm: perm, ID: aclUndefinedID} }

func TestACLEncodeRoundTrip(t *testing.T) {
	tests := []ACL{
		FromMode(0o700),
		FromMode(0o640),
		{o(UserObj, 7), u(User, 1000, 5), u(User, 4321, 4), o(GroupObj, 0), u(Group, 50, 1), o(Mask, 5), o(Other, 0)},
	}
	for _, a := range tests {
		b := a.Encode()
		if len(b) != 4+8*len(a) {
			t.Errorf("Encode(%v) is %d bytes, want %d", a, len(b), 4+8*len(a))
		}
		got, err := Parse(b)
		if err != nil || !reflect.DeepEqual(got, a) {
			t.Errorf("Parse(Encode(%v)) = %v, %v; want it back", a, got, err)
		}
	}
	// The kernel's layout, byte for byte: version 2, then {tag, perm, id}.
	want := []byte{2, 0, 0, 0, 1, 0, 6, 0, 0xff, 0xff, 0xff, 0xff, 2, 0, 4, 0, 0xe8, 0x03, 0, 0}
	if got := (ACL{u(User, 1000, 4), o(UserObj, 6)}).Encode(); string(got) != string(want) {
		t.Errorf("Encode = % x, want % x (sorted, little-endian)", got, want)
	}
}

func TestParseACLHostile(t *testing.T) {
	good := FromMode(0o700).Encode()
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
		if _, err := Parse(b); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Parse(%s) = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := Parse(good); err != nil {
		t.Errorf("Parse(legitimate) = %v", err)
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
		{"minimal 0700", FromMode(0o700), 1000, 5,
			ACL{o(UserObj, 7), u(User, 1000, 5), o(GroupObj, 0), o(Mask, 5), o(Other, 0)}},
		{"mask covers the owning group", FromMode(0o750), 1000, 4,
			ACL{o(UserObj, 7), u(User, 1000, 4), o(GroupObj, 5), o(Mask, 5), o(Other, 0)}},
		{"existing entry keeps its bits", ACL{o(UserObj, 7), u(User, 1000, 2), o(GroupObj, 0), o(Mask, 2), o(Other, 0)}, 1000, 4,
			ACL{o(UserObj, 7), u(User, 1000, 6), o(GroupObj, 0), o(Mask, 6), o(Other, 0)}},
		{"narrow mask only gains perm", ACL{o(UserObj, 7), u(User, 7, 7), o(GroupObj, 0), o(Mask, 0), o(Other, 0)}, 1000, 4,
			ACL{o(UserObj, 7), u(User, 7, 7), u(User, 1000, 4), o(GroupObj, 0), o(Mask, 4), o(Other, 0)}},
	}
	for _, tt := range tests {
		if got := tt.in.WithUser(tt.uid, tt.perm); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: WithUser(%d, %o) = %v, want %v", tt.name, tt.uid, tt.perm, got, tt.want)
		}
	}
}

func TestACLPermitsCase(t *testing.T) {
	a := ACL{o(UserObj, 6), u(User, 1000, 6), o(GroupObj, 6), u(Group, 50, 4), o(Mask, 4), o(Other, 0)}
	tests := []struct {
		uid, gid uint32
		want     uint16
		ok       bool
	}{
		{7, 7, Read | Write, true},     // owner
		{1000, 9, Read, true},          // named user
		{1000, 9, Write, false},        // masked
		{9, 8, Read, true},             // owning group, masked to r
		{9, 8, Write, false},           // owning group's w is masked
		{9, 50, Read, true},            // named group
		{9, 9, Read, false},            // other
		{0, 0, Read, false},            // uid 0 without capabilities
		{1000, 8, Read | Write, false}, // a named user does not fall through to its group
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
	return fixtures.Xattr(t, path, aclXattr, Parse)
}

func TestGrantUserOnDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := Grant(f, uint32(os.Geteuid()), 4321, Read); errors.Is(err, syscall.EOPNOTSUPP) {
		t.Fatalf("the test directory's file system has no POSIX ACLs: %v", err)
	} else if err != nil {
		t.Fatalf("Grant = %v", err)
	}
	want := ACL{o(UserObj, 6), u(User, 4321, 4), o(GroupObj, 0), o(Mask, 4), o(Other, 0)}
	if got := readACL(t, path); !reflect.DeepEqual(got, want) {
		t.Errorf("ACL after Grant = %v, want %v", got, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o640 {
		t.Errorf("mode after Grant = %v, %v; want 0640 (the group bits show the mask)", fi.Mode(), err)
	}
	// Granting again writes nothing new.
	if err := Grant(f, uint32(os.Geteuid()), 4321, Read); err != nil {
		t.Fatal(err)
	}
	if got := readACL(t, path); !reflect.DeepEqual(got, want) {
		t.Errorf("ACL after a second Grant = %v, want %v", got, want)
	}
	for _, tt := range []struct {
		uid  uint32
		want uint16
		ok   bool
	}{{4321, Read, true}, {4321, Write, false}, {4322, Read, false}} {
		if ok, err := MayAccess(path, tt.uid, tt.uid, tt.want); err != nil || ok != tt.ok {
			t.Errorf("MayAccess(%d, %o) = %v, %v; want %v", tt.uid, tt.want, ok, err, tt.ok)
		}
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
