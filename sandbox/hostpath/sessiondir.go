package hostpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/acl"
)

// EffectiveOwner is o, or the running process's effective uid:gid when o
// is not set.
func EffectiveOwner(o sandbox.Owner) sandbox.Owner {
	if o.Set {
		return o
	}
	return sandbox.Owner{UID: uint32(os.Geteuid()), GID: uint32(os.Getegid()), Set: true}
}

// MakeSessionDir creates, or checks, the session directory td and its
// spill/ subdirectory for the harness user owner (unset: this process),
// without following links, and lets reader (when set and not the owner)
// read both through a POSIX ACL entry user:<reader>:r-x. It returns the
// user who owns the directory afterwards, whom spill files are given to.
//
// Missing parents of td are created as MkdirNoFollow does, by and for
// this process, mode 0700, or 0711 when owner is another user (who must
// traverse them to reach its directory; they hold other sessions, which
// it cannot list). td and spill/ are created 0700 and given to owner. An
// existing one is left to owner when owner owns it; given to owner when
// this process owns it (a directory the service made); kept by its owner,
// who then stands for the harness, when the harness is root (root acting
// for a user, e.g. under sudo, on a directory that user's dsh made); and
// refused, as an error wrapping ErrInvalid naming session.transcriptDir,
// when a third user owns it: the service would write a call's output
// into a directory someone else controls. A file system without POSIX
// ACLs gets no entry (the call then reads the directory only when it
// runs as its owner). Other errors wrap ErrInternal.
func MakeSessionDir(td string, owner, reader sandbox.Owner) (sandbox.Owner, error) {
	const field = "session.transcriptDir"
	td = filepath.Clean(td)
	owner = EffectiveOwner(owner)
	self := uint32(os.Geteuid())
	parentPerm := fs.FileMode(0o700)
	if owner.UID != self {
		parentPerm = 0o711
	}
	parent, err := MkdirNoFollow(field, filepath.Dir(td), parentPerm)
	if err != nil {
		return sandbox.Owner{}, err
	}
	defer parent.Close()
	dir, owner, err := ownedDir(field, parent, td, owner, reader, self)
	if err != nil {
		return sandbox.Owner{}, err
	}
	defer dir.Close()
	spill, owner, err := ownedDir(field, dir, filepath.Join(td, "spill"), owner, reader, self)
	if err != nil {
		return sandbox.Owner{}, err
	}
	return owner, spill.Close()
}

// ownedDir creates or opens the directory path (its last component
// relative to parent, never following a link), settles its owner and
// gives reader read access, as MakeSessionDir describes. It returns the
// directory opened for reading, which the caller closes, and its owner.
func ownedDir(field string, parent *os.File, path string, owner, reader sandbox.Owner, self uint32) (*os.File, sandbox.Owner, error) {
	name := filepath.Base(path)
	created := false
	switch err := syscall.Mkdirat(int(parent.Fd()), name, 0o700); {
	case err == nil:
		created = true
	case !errors.Is(err, syscall.EEXIST):
		return nil, sandbox.Owner{}, sandbox.Errorf(sandbox.ErrInternal, "sandbox: %s %q: create: %w", field, path, err)
	}
	fd, err := syscall.Openat(int(parent.Fd()), name, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR):
		return nil, sandbox.Owner{}, sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q is a symbolic link or not a directory; links are never followed", field, path)
	case err != nil:
		return nil, sandbox.Owner{}, sandbox.Errorf(sandbox.ErrInternal, "sandbox: %s %q: open: %w", field, path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	fail := func(err error) (*os.File, sandbox.Owner, error) {
		f.Close()
		return nil, sandbox.Owner{}, err
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return fail(sandbox.Errorf(sandbox.ErrInternal, "sandbox: %s %q: stat: %w", field, path, err))
	}
	give := false
	switch {
	case st.Uid == owner.UID:
	case created || st.Uid == self:
		give = true
	case owner.UID == 0:
		owner = sandbox.Owner{UID: st.Uid, GID: st.Gid, Set: true}
	default:
		return fail(sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q is owned by uid %d, neither the harness user (uid %d) nor the service (uid %d); refusing to put a call's output in another user's directory (run the harness as uid %d)", field, path, st.Uid, owner.UID, self, st.Uid))
	}
	if reader.Set && reader.UID != owner.UID {
		if err := acl.Grant(f, owner.UID, reader.UID, acl.Read|acl.Execute); err != nil && !errors.Is(err, syscall.EOPNOTSUPP) {
			return fail(sandbox.Errorf(sandbox.ErrInternal, "sandbox: %s %q: grant read access to uid %d: %w", field, path, reader.UID, err))
		}
	}
	if give {
		if err := syscall.Fchown(fd, int(owner.UID), int(owner.GID)); err != nil {
			return fail(sandbox.Errorf(sandbox.ErrInternal, "sandbox: %s %q: give it to the harness user %d:%d: %w", field, path, owner.UID, owner.GID, err))
		}
	}
	return f, owner, nil
}
