// Package safefile reads files that configure dsh-sandbox but that
// someone other than the operator may have planted: hook configurations,
// policy files and the --config file of flag defaults (DESIGN §3.10, STYLE
// 18). Such a file is opened as data: no symbolic link is followed in any
// component of its path, it is opened without blocking (a FIFO cannot hang
// the reader), it must be a regular file, and it is read up to a bound.
// Files only the operator may have written can also be required to be
// owned by root or the invoking user, to be writable by nobody else and
// to lie outside given directories (the workspaces a call can write).
//
// It imports no package of this module (only the standard library and
// golang.org/x/sys/unix), so that every layer may use it: hooks, policy
// and cmd/dsh-sandbox do. It is Linux-only, like the project.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Dir is a directory a file must not lie in.
type Dir struct {
	// What names the directory in errors, such as "the workspace" or
	// "workspace root".
	What string
	// Path is the directory. Links in it are followed: it names the
	// directory whatever path reaches it. A Path that does not exist
	// contains nothing; "" is ignored.
	Path string
}

// Options are the checks Read makes. MaxBytes is required.
type Options struct {
	// MaxBytes bounds the file's size in bytes; it must be positive.
	MaxBytes int64
	// OperatorOwned also requires the file to be owned by root or the
	// effective uid of this process and to have neither the group nor
	// the other write bit. False means any owner and mode.
	OperatorOwned bool
	// Outside are directories the file must not lie in, at any depth.
	// The file's directories are compared by device and inode, so a
	// second path to a directory (a link to it, a bind mount of it) is
	// found too. Nil means no such check.
	Outside []Dir
}

// Read opens the file at path as data and returns its content. A relative
// path is taken from the process's working directory as the kernel
// reports it. Every error names path and says why, and wraps the os error
// where there is one (fs.ErrNotExist for a missing file): a symbolic link
// in any component, a final component that is not a regular file (a
// FIFO, a directory, a device, a socket), a file over o.MaxBytes, and,
// per o, a file owned by another user, writable by group or others, or
// lying inside one of o.Outside. Read is safe for concurrent use.
func Read(path string, o Options) ([]byte, error) {
	if o.MaxBytes <= 0 {
		return nil, fmt.Errorf("%s: safefile.Options.MaxBytes %d is not positive", path, o.MaxBytes)
	}
	abs, err := absolute(path)
	if err != nil {
		return nil, err
	}
	f, parents, err := open(abs, path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if kind := kindOf(st.Mode); kind != "" {
		return nil, fmt.Errorf("%s: is %s, not a regular file", path, kind)
	}
	if st.Size > o.MaxBytes {
		return nil, fmt.Errorf("%s: is %d bytes, larger than the limit of %d", path, st.Size, o.MaxBytes)
	}
	if o.OperatorOwned {
		if euid := uint32(os.Geteuid()); st.Uid != 0 && st.Uid != euid {
			return nil, fmt.Errorf("%s: is owned by uid %d, not by root or the invoking user (uid %d)", path, st.Uid, euid)
		}
		if st.Mode&0o022 != 0 {
			return nil, fmt.Errorf("%s: is writable by its group or by others (mode %04o); allow writes by its owner only", path, st.Mode&0o7777)
		}
	}
	for _, d := range o.Outside {
		if d.Path == "" {
			continue
		}
		var ds unix.Stat_t
		if err := unix.Stat(d.Path, &ds); err != nil {
			continue // a directory that does not exist holds no file
		}
		for _, p := range parents {
			if p.dev == uint64(ds.Dev) && p.ino == ds.Ino {
				return nil, fmt.Errorf("%s: lies inside %s %s, which a sandboxed call can write", path, d.What, d.Path)
			}
		}
	}
	data, err := io.ReadAll(io.LimitReader(f, o.MaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(data)) > o.MaxBytes {
		return nil, fmt.Errorf("%s: grew past the limit of %d bytes while being read", path, o.MaxBytes)
	}
	return data, nil
}

// absolute returns path as a clean absolute path. A relative path is
// joined to the kernel's working directory (unix.Getwd, which has no
// links in it), not to $PWD.
func absolute(path string) (string, error) {
	switch {
	case path == "":
		return "", errors.New("empty file name")
	case strings.IndexByte(path, 0) >= 0:
		return "", fmt.Errorf("%q: contains a NUL byte", path)
	case filepath.IsAbs(path):
		return filepath.Clean(path), nil
	}
	wd, err := unix.Getwd()
	if err != nil {
		return "", fmt.Errorf("%s: working directory: %w", path, err)
	}
	return filepath.Join(wd, path), nil
}

// devIno identifies a directory.
type devIno struct {
	dev, ino uint64
}

// open opens the clean absolute path abs one component at a time from /,
// following no link, and returns the file, opened read-only and
// non-blocking, with the identities of every directory above it. Errors
// begin with name, the path as the caller gave it.
func open(abs, name string) (*os.File, []devIno, error) {
	if abs == "/" {
		return nil, nil, fmt.Errorf("%s: is a directory, not a regular file", name)
	}
	dirfd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: opening /: %w", name, err)
	}
	defer func() { unix.Close(dirfd) }()
	var parents []devIno
	addParent := func(fd int, dir string) error {
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("%s: %s: %w", name, dir, err)
		}
		parents = append(parents, devIno{uint64(st.Dev), st.Ino})
		return nil
	}
	if err := addParent(dirfd, "/"); err != nil {
		return nil, nil, err
	}
	comps := strings.Split(abs[1:], "/")
	walked := ""
	for _, c := range comps[:len(comps)-1] {
		walked += "/" + c
		fd, err := unix.Openat(dirfd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, nil, componentError(name, walked, dirfd, c, err)
		}
		unix.Close(dirfd)
		dirfd = fd
		if err := addParent(dirfd, walked); err != nil {
			return nil, nil, err
		}
	}
	last := comps[len(comps)-1]
	// Refuse what is not a regular file before opening it, so that
	// opening has no side effect on a device; the fstat of the opened
	// file in Read is the check that counts.
	var st unix.Stat_t
	if err := fstatat(dirfd, last, &st); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	if kind := kindOf(st.Mode); kind != "" {
		return nil, nil, fmt.Errorf("%s: is %s, not a regular file", name, kind)
	}
	fd, err := unix.Openat(dirfd, last, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, nil, fmt.Errorf("%s: is a symbolic link; give the path of the file itself", name)
		}
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return os.NewFile(uintptr(fd), abs), parents, nil
}

// componentError explains why the directory component c (at the absolute
// path walked) of the file name could not be opened.
func componentError(name, walked string, dirfd int, c string, err error) error {
	var st unix.Stat_t
	if serr := fstatat(dirfd, c, &st); serr == nil {
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return fmt.Errorf("%s: %s is a symbolic link; give the path without links", name, walked)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return fmt.Errorf("%s: %s is not a directory", name, walked)
		}
	}
	return fmt.Errorf("%s: %s: %w", name, walked, err)
}

// fstatat stats name in dirfd without following a link.
func fstatat(dirfd int, name string, st *unix.Stat_t) error {
	return unix.Fstatat(dirfd, name, st, unix.AT_SYMLINK_NOFOLLOW)
}

// kindOf names the file type of mode when it is not a regular file; ""
// for a regular file.
func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return ""
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return "of an unknown type"
}
