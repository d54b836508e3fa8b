package acl

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"slices"
	"syscall"
	"unsafe"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// POSIX access ACLs, read and written as the system.posix_acl_access
// extended attribute in the kernel's format (include/uapi/linux/
// posix_acl_xattr.h): a little-endian u32 version (2), then one entry of
// {tag u16, perm u16, id u32} per line of the ACL. The service uses them
// to let a call read its session directory and spill files, which the
// harness user owns with mode 0700/0600, without a setfacl binary.

// Tag is the tag of an ACL entry (ACL_USER_OBJ … ACL_OTHER).
type Tag uint16

// ACL entry tags, in the order the kernel requires them.
const (
	UserObj  Tag = 0x01
	User     Tag = 0x02
	GroupObj Tag = 0x04
	Group    Tag = 0x08
	Mask     Tag = 0x10
	Other    Tag = 0x20
)

// ACL permission bits.
const (
	Read    uint16 = 4
	Write   uint16 = 2
	Execute uint16 = 1
)

const (
	aclXattr       = "system.posix_acl_access"
	aclVersion     = 2
	aclUndefinedID = ^uint32(0)
	aclHeaderSize  = 4
	aclEntrySize   = 8
)

// Entry is one entry of an ACL. ID is the uid (User) or gid
// (Group); the other tags carry no id.
type Entry struct {
	Tag  Tag
	Perm uint16
	ID   uint32
}

// ACL is a POSIX access ACL. A valid one has exactly one UserObj,
// GroupObj and Other entry, and an Mask entry when it has named
// users or groups. It is a plain value; methods return copies.
type ACL []Entry

// Parse decodes the value of a system.posix_acl_access attribute.
// Errors wrap ErrInvalid: a version other than 2, a size that is not a
// whole number of entries, an unknown tag or a permission above 7.
func Parse(b []byte) (ACL, error) {
	if len(b) < aclHeaderSize || (len(b)-aclHeaderSize)%aclEntrySize != 0 {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "sandbox: ACL of %d bytes is not a header and whole entries", len(b))
	}
	if v := binary.LittleEndian.Uint32(b); v != aclVersion {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "sandbox: ACL version %d, want %d", v, aclVersion)
	}
	a := make(ACL, 0, (len(b)-aclHeaderSize)/aclEntrySize)
	for off := aclHeaderSize; off < len(b); off += aclEntrySize {
		e := Entry{
			Tag:  Tag(binary.LittleEndian.Uint16(b[off:])),
			Perm: binary.LittleEndian.Uint16(b[off+2:]),
			ID:   binary.LittleEndian.Uint32(b[off+4:]),
		}
		switch e.Tag {
		case UserObj, GroupObj, Mask, Other:
			e.ID = aclUndefinedID
		case User, Group:
		default:
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "sandbox: ACL entry with unknown tag %#x", uint16(e.Tag))
		}
		if e.Perm > 7 {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "sandbox: ACL entry with permission %#o", e.Perm)
		}
		a = append(a, e)
	}
	return a, nil
}

// Encode returns the attribute value of a, its entries sorted by tag and
// id as the kernel requires.
func (a ACL) Encode() []byte {
	s := a.sorted()
	b := make([]byte, aclHeaderSize, aclHeaderSize+aclEntrySize*len(s))
	binary.LittleEndian.PutUint32(b, aclVersion)
	for _, e := range s {
		id := e.ID
		if e.Tag != User && e.Tag != Group {
			id = aclUndefinedID
		}
		b = binary.LittleEndian.AppendUint16(b, uint16(e.Tag))
		b = binary.LittleEndian.AppendUint16(b, e.Perm)
		b = binary.LittleEndian.AppendUint32(b, id)
	}
	return b
}

func (a ACL) sorted() ACL {
	s := slices.Clone(a)
	slices.SortStableFunc(s, func(x, y Entry) int {
		if x.Tag != y.Tag {
			return int(x.Tag) - int(y.Tag)
		}
		switch {
		case x.ID < y.ID:
			return -1
		case x.ID > y.ID:
			return 1
		}
		return 0
	})
	return s
}

// FromMode is the minimal ACL equivalent to the permission bits perm.
func FromMode(perm fs.FileMode) ACL {
	p := uint16(perm.Perm())
	return ACL{
		{Tag: UserObj, Perm: p >> 6 & 7, ID: aclUndefinedID},
		{Tag: GroupObj, Perm: p >> 3 & 7, ID: aclUndefinedID},
		{Tag: Other, Perm: p & 7, ID: aclUndefinedID},
	}
}

// WithUser returns a copy of a in which the named user uid has at least
// the permissions perm: an existing entry for uid keeps its bits and
// gains perm; a new entry gets perm. The mask gains perm (a new mask is
// the union of the group class: the owning group, named users and
// groups), so the entry is effective and nothing else is widened.
func (a ACL) WithUser(uid uint32, perm uint16) ACL {
	out := slices.Clone(a)
	found, mask := false, -1
	var class uint16
	for i, e := range out {
		switch e.Tag {
		case User:
			if e.ID == uid {
				out[i].Perm |= perm
				found = true
			}
			class |= out[i].Perm
		case GroupObj, Group:
			class |= e.Perm
		case Mask:
			mask = i
		}
	}
	if !found {
		out = append(out, Entry{Tag: User, Perm: perm, ID: uid})
		class |= perm
	}
	if mask >= 0 {
		out[mask].Perm |= perm
	} else {
		out = append(out, Entry{Tag: Mask, Perm: class, ID: aclUndefinedID})
	}
	return out.sorted()
}

// NamedUser is the permission bits of the named-user entry of uid in a
// (before the mask), and whether a has one.
func (a ACL) NamedUser(uid uint32) (uint16, bool) {
	for _, e := range a {
		if e.Tag == User && e.ID == uid {
			return e.Perm, true
		}
	}
	return 0, false
}

// Permits reports whether a process running as uid:gid, with no
// supplementary groups and no capabilities, gets the permission bits
// want on a file owned by owner:group that carries a, by the POSIX.1e
// access check: the owner entry, else a named-user entry (masked), else
// the owning group and named groups (masked), else other.
func (a ACL) Permits(owner, group, uid, gid uint32, want uint16) bool {
	var mask uint16 = 7
	hasMask := false
	for _, e := range a {
		if e.Tag == Mask {
			mask, hasMask = e.Perm, true
		}
	}
	get := func(tag Tag) (uint16, bool) {
		for _, e := range a {
			if e.Tag == tag {
				return e.Perm, true
			}
		}
		return 0, false
	}
	if uid == owner {
		p, _ := get(UserObj)
		return p&want == want
	}
	if p, ok := a.NamedUser(uid); ok {
		return p&mask&want == want
	}
	matched := false
	for _, e := range a {
		if (e.Tag == GroupObj && gid == group) || (e.Tag == Group && e.ID == gid) {
			matched = true
			p := e.Perm
			if hasMask {
				p &= mask
			}
			if p&want == want {
				return true
			}
		}
	}
	if matched {
		return false
	}
	p, _ := get(Other)
	return p&want == want
}

// fileACL returns the access ACL of the open file f: its attribute, or
// the minimal ACL of its mode when it has none.
func fileACL(f *os.File) (ACL, error) {
	fd := int(f.Fd())
	buf := make([]byte, 256)
	for {
		n, err := fgetxattr(fd, aclXattr, buf)
		switch {
		case errors.Is(err, syscall.ERANGE):
			buf = make([]byte, 2*len(buf))
			continue
		case errors.Is(err, syscall.ENODATA):
			var st syscall.Stat_t
			if err := syscall.Fstat(fd, &st); err != nil {
				return nil, err
			}
			return FromMode(fs.FileMode(st.Mode)), nil
		case err != nil:
			return nil, err
		}
		return Parse(buf[:n])
	}
}

// Grant makes sure the user uid has at least perm on the open file f
// (not an O_PATH descriptor) through its access ACL, keeping every other
// entry, judged as if owner owned f (it may be about to change hands).
// It writes nothing when the ACL already grants it. An error wrapping
// syscall.EOPNOTSUPP means the file system has no POSIX ACLs.
func Grant(f *os.File, owner, uid uint32, perm uint16) error {
	a, err := fileACL(f)
	if err != nil {
		return err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	if a.Permits(owner, st.Gid, uid, aclUndefinedID, perm) {
		return nil
	}
	return fsetxattr(int(f.Fd()), aclXattr, a.WithUser(uid, perm).Encode(), 0)
}

// MayAccess reports whether a process running as uid:gid with no
// supplementary groups and no capabilities gets the permission bits want
// (Read, Write, Execute) on path, following a final link as
// stat does, by its mode and its POSIX access ACL. It opens nothing. It
// is how reports (`policy check`, `doctor`) predict what a call can read.
func MayAccess(path string, uid, gid uint32, want uint16) (bool, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return false, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	a := FromMode(fs.FileMode(st.Mode))
	buf := make([]byte, 1024)
	n, err := syscall.Getxattr(path, aclXattr, buf)
	switch {
	case err == nil:
		parsed, perr := Parse(buf[:n])
		if perr != nil {
			return false, perr
		}
		a = parsed
	case errors.Is(err, syscall.ERANGE):
		return false, &fs.PathError{Op: "getxattr", Path: path, Err: err}
	}
	// ENODATA, EOPNOTSUPP: the mode is the whole story.
	return a.Permits(st.Uid, st.Gid, uid, gid, want), nil
}

// fgetxattr is fgetxattr(2) on the descriptor fd (the syscall package
// has only the path forms).
func fgetxattr(fd int, name string, dest []byte) (int, error) {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return 0, err
	}
	var d unsafe.Pointer
	if len(dest) > 0 {
		d = unsafe.Pointer(&dest[0])
	}
	n, _, errno := syscall.Syscall6(syscall.SYS_FGETXATTR, uintptr(fd), uintptr(unsafe.Pointer(p)), uintptr(d), uintptr(len(dest)), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// fsetxattr is fsetxattr(2) on the descriptor fd.
func fsetxattr(fd int, name string, value []byte, flags int) error {
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return err
	}
	var v unsafe.Pointer
	if len(value) > 0 {
		v = unsafe.Pointer(&value[0])
	}
	_, _, errno := syscall.Syscall6(syscall.SYS_FSETXATTR, uintptr(fd), uintptr(unsafe.Pointer(p)), uintptr(v), uintptr(len(value)), uintptr(flags), 0)
	if errno != 0 {
		return errno
	}
	return nil
}
