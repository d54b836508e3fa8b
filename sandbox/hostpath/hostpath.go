package hostpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// ResolveDir returns the clean absolute form of path after checking that
// it exists, is a directory and that no component of it is a symbolic
// link (resolved component by component without following links: openat2
// with RESOLVE_NO_SYMLINKS, falling back to an O_NOFOLLOW|O_PATH walk
// where openat2 is missing). Errors wrap ErrInvalid and name field; a
// missing path wraps fs.ErrNotExist too.
//
// The path is checked as written, ".." components included, so the clean
// form returned names the same directory as the path given.
func ResolveDir(field, path string) (string, error) {
	return resolve(field, path, true)
}

// ResolvePath is ResolveDir for a path that may also be a regular file or
// any other non-link object (a policy mount source): every component but
// the last must be a directory, and none may be a symbolic link.
func ResolvePath(field, path string) (string, error) {
	return resolve(field, path, false)
}

// systemDirs are the directories SystemDir refuses exactly; systemTrees
// are refused with everything below them.
var (
	systemDirs = []string{
		"/", "/root", "/run", "/var/run", "/var/lib", "/var", "/home",
	}
	systemTrees = []string{"/proc", "/sys", "/dev", "/etc", "/boot", "/usr", "/bin", "/sbin"}
)

// SystemDir reports whether the clean absolute path is a system directory
// that may never be a workspace or be mounted: "/", /etc, /proc, /sys,
// /dev, /usr, /boot, /root, /run, /var/run, /bin, /sbin, /lib*, /var/lib
// (and anything below /proc, /sys, /dev, /etc, /boot, and below the
// directories of host programs: /usr, /bin, /sbin, /lib*). /var and
// /home, which hold every user's data, count too; their subdirectories
// (a user's home, /var/lib/<service>) do not. A path that is not clean
// and absolute is reported as a system directory (fail closed).
func SystemDir(path string) bool {
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return true
	}
	if slices.Contains(systemDirs, path) {
		return true
	}
	top, _, _ := strings.Cut(path[1:], "/")
	if strings.HasPrefix(top, "lib") {
		return true // /lib, /lib32, /lib64, /libexec and below
	}
	for _, t := range systemTrees {
		if Within(path, t) {
			return true
		}
	}
	return false
}

// Within reports whether the clean absolute path is root or lies below
// it. Both are compared as clean absolute paths; a relative one is never
// within anything.
func Within(path, root string) bool {
	if !filepath.IsAbs(path) || !filepath.IsAbs(root) {
		return false
	}
	path, root = filepath.Clean(path), filepath.Clean(root)
	if root == "/" || path == root {
		return true
	}
	return strings.HasPrefix(path, root+"/")
}

// MkdirNoFollow creates the directory path and any missing parents with
// mode perm (subject to the umask) without following links: each
// component is opened O_NOFOLLOW relative to its parent's descriptor and
// created there with mkdirat when missing. A symbolic link anywhere in
// the chain, existing or planted while it runs, is an error, never
// followed; so is a component that is not a directory or a ".."
// component. It returns an O_PATH descriptor of the directory, usable as
// the dir of CreateNoFollow or as the dirfd of other *at calls; the
// caller closes it. Errors wrap ErrInvalid (a link, a non-directory, a relative
// path) or ErrInternal (the file system failed) and name field.
func MkdirNoFollow(field, path string, perm fs.FileMode) (*os.File, error) {
	fd, err := walk(field, path, true, uint32(perm.Perm()))
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Clean(path)), nil
}

// OpenDirNoFollow opens the existing directory path as MkdirNoFollow does
// but creates nothing: a missing component wraps fs.ErrNotExist.
func OpenDirNoFollow(field, path string) (*os.File, error) {
	fd, err := walk(field, path, false, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Clean(path)), nil
}

// CreateNoFollow creates the regular file name (a single component) in
// the directory dir with mode perm and opens it for writing:
// O_CREAT|O_EXCL|O_NOFOLLOW relative to dir's descriptor, so an existing
// file or link of that name is an error and nothing outside dir is
// touched.
func CreateNoFollow(dir *os.File, name string, perm fs.FileMode) (*os.File, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsRune(name, '/') {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "sandbox: file name %q is not a single path component", name)
	}
	fd, err := syscall.Openat(int(dir.Fd()), name, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return nil, &fs.PathError{Op: "openat", Path: filepath.Join(dir.Name(), name), Err: err}
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), name)), nil
}

// tryOpenat2 is false only in tests of the fallback walk.
var tryOpenat2 = true

// resolve implements ResolveDir and ResolvePath.
func resolve(field, path string, wantDir bool) (string, error) {
	if err := checkAbs(field, path); err != nil {
		return "", err
	}
	flags := uint64(oPath | syscall.O_CLOEXEC)
	if wantDir {
		flags |= syscall.O_DIRECTORY
	}
	fd, err := -1, error(syscall.ENOSYS)
	if tryOpenat2 {
		fd, err = openat2(atFDCWD, path, &openHow{
			flags:   flags | syscall.O_NOFOLLOW,
			resolve: resolveNoSymlinks | resolveNoMagiclinks,
		})
	}
	if err == nil {
		defer syscall.Close(fd)
		// O_PATH|O_NOFOLLOW opens a final link itself.
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil {
			return "", sandbox.Errorf(sandbox.ErrInternal, "sandbox: %s %q: %w", field, path, err)
		}
		switch mode := st.Mode & syscall.S_IFMT; {
		case mode == syscall.S_IFLNK:
			return "", sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q is a symbolic link; links are never followed", field, path)
		case wantDir && mode != syscall.S_IFDIR:
			return "", sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q is not a directory", field, path)
		}
		return filepath.Clean(path), nil
	}
	// openat2 is missing (ENOSYS), refused by a seccomp filter (EPERM) or
	// failed: the walk either works or says precisely which component is
	// wrong.
	wfd, werr := walkWant(field, path, false, 0, wantDir)
	if werr != nil {
		return "", werr
	}
	syscall.Close(wfd)
	if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.E2BIG) {
		return filepath.Clean(path), nil
	}
	// openat2 refused what the walk accepted: the tree changed between
	// the two; fail closed.
	return "", sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q changed while it was resolved: %w", field, path, err)
}

// checkAbs refuses an empty, relative or NUL-carrying path.
func checkAbs(field, path string) error {
	switch {
	case path == "":
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s is empty", field)
	case strings.IndexByte(path, 0) >= 0:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q contains a NUL byte", field, path)
	case !filepath.IsAbs(path):
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q is not an absolute path", field, path)
	}
	return nil
}

// walk opens path component by component from "/" without following
// links, creating missing directories (mode perm) when create is set,
// and returns an O_PATH descriptor of the final directory.
func walk(field, path string, create bool, perm uint32) (int, error) {
	return walkWant(field, path, create, perm, true)
}

// walkWant is walk; when wantDir is false the final component may be any
// object but a symbolic link.
func walkWant(field, path string, create bool, perm uint32, wantDir bool) (int, error) {
	if err := checkAbs(field, path); err != nil {
		return -1, err
	}
	fd, err := syscall.Open("/", oPath|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, sandbox.Errorf(sandbox.ErrInternal, "sandbox: %s: open /: %w", field, err)
	}
	parts := strings.Split(path, "/")
	last := lastComponent(parts)
	at := "/"
	for i, name := range parts {
		if name == "" || name == "." {
			continue
		}
		if name == ".." && create {
			syscall.Close(fd)
			return -1, sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q has a \"..\" component", field, path)
		}
		at = filepath.Join(at, name)
		next, err := openComponent(fd, name, create, perm, field, path, at)
		if err != nil {
			return -1, err
		}
		fd = next
		if err := checkComponent(fd, i < last || wantDir, field, path, at); err != nil {
			syscall.Close(fd)
			return -1, err
		}
	}
	return fd, nil
}

// lastComponent is the index in parts (a path split at "/") of the
// path's last component, ignoring a trailing "/" or "/.".
func lastComponent(parts []string) int {
	last := len(parts) - 1
	for last > 0 && (parts[last] == "" || parts[last] == ".") {
		last-- // trailing "/" or "/."
	}
	return last
}

// openComponent opens name in the directory dir without following a
// link, first creating it as a directory (mode perm) when it is missing
// and create is set, and returns an O_PATH descriptor of it. It closes
// dir in every case. field, path and at (the path up to name) name the
// component in errors.
func openComponent(dir int, name string, create bool, perm uint32, field, path, at string) (int, error) {
	next, err := syscall.Openat(dir, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ENOENT) && create {
		if merr := syscall.Mkdirat(dir, name, perm); merr != nil && !errors.Is(merr, syscall.EEXIST) {
			syscall.Close(dir)
			return -1, sandbox.Errorf(sandbox.ErrInternal, "sandbox: %s %q: create %s: %w", field, path, at, merr)
		}
		next, err = syscall.Openat(dir, name, oPath|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	}
	syscall.Close(dir)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) {
			return -1, sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q: %s does not exist: %w", field, path, at, fs.ErrNotExist)
		}
		return -1, sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q: %s: %w", field, path, at, err)
	}
	return next, nil
}

// checkComponent refuses the opened component fd when it is a symbolic
// link, or not a directory while mustBeDir is set (every component but
// the last, and the last when a directory is wanted). It leaves fd open.
func checkComponent(fd int, mustBeDir bool, field, path, at string) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return sandbox.Errorf(sandbox.ErrInternal, "sandbox: %s %q: stat %s: %w", field, path, at, err)
	}
	switch mode := st.Mode & syscall.S_IFMT; {
	case mode == syscall.S_IFLNK:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q: %s is a symbolic link; links are never followed", field, path, at)
	case mode != syscall.S_IFDIR && mustBeDir:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q: %s is not a directory", field, path, at)
	}
	return nil
}

// CheckDeployment refuses a deployment shape in which a call could write
// what the service trusts: it returns an error wrapping ErrInvalid when a
// protected path (by name: "sessions root", "dsh home", "state dir",
// "service socket"; empty paths are skipped) lies inside workspace, the
// directory a call mounts read-write, or workspace lies inside it (a
// workspace in the sessions root exposes every session). The message
// names both paths. Protected paths are compared as written and with
// their links resolved (as far as they exist), so a link to a directory
// inside the workspace counts too. workspace should come from
// ResolveDir. It only reads the file system; safe for concurrent use.
func CheckDeployment(workspace string, protected map[string]string) error {
	if workspace == "" {
		return nil
	}
	ws := filepath.Clean(workspace)
	names := make([]string, 0, len(protected))
	for name := range protected {
		names = append(names, name)
	}
	slices.Sort(names)
	var inside, around []string
	for _, name := range names {
		p := protected[name]
		if p == "" {
			continue
		}
		if !filepath.IsAbs(p) {
			return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q is not an absolute path", name, p)
		}
		for _, form := range []string{filepath.Clean(p), Real(p)} {
			if Within(form, ws) {
				inside = append(inside, "the "+name+" "+form)
				break
			}
			if Within(ws, form) {
				around = append(around, "the "+name+" "+form)
				break
			}
		}
	}
	switch {
	case len(inside) > 0:
		verb := "lies"
		if len(inside) > 1 {
			verb = "lie"
		}
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %s inside the workspace %s, which a call sees (read-write it could forge or redirect them, read-only it reads every session's transcripts and other calls' state); move it out of the workspace", joinAnd(inside), verb, ws)
	case len(around) > 0:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: the workspace %s lies inside %s; a call could write it", ws, joinAnd(around))
	}
	return nil
}

// joinAnd is "a", "a and b", "a, b and c".
func joinAnd(items []string) string {
	if len(items) < 2 {
		return strings.Join(items, "")
	}
	return strings.Join(items[:len(items)-1], ", ") + " and " + items[len(items)-1]
}

// Real is path, cleaned, with every link of its longest existing prefix
// resolved, and the rest appended as written. Use it only for paths the
// operator chose (a state directory), never for one a call could change.
func Real(path string) string {
	path = filepath.Clean(path)
	rest := ""
	for dir := path; ; dir = filepath.Dir(dir) {
		if r, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(r, rest)
		}
		if dir == "/" {
			return path
		}
		rest = filepath.Join(filepath.Base(dir), rest)
	}
}

// Linux constants the syscall package lacks.
const (
	// oPath is O_PATH on every architecture but alpha, parisc and sparc.
	oPath = 0x200000
	// atFDCWD is AT_FDCWD.
	atFDCWD = -0x64
	// sysOpenat2 is openat2(2), the same number on every architecture
	// (Linux 5.6).
	sysOpenat2 = 437
	// RESOLVE_NO_MAGICLINKS and RESOLVE_NO_SYMLINKS of openat2(2).
	resolveNoMagiclinks = 0x02
	resolveNoSymlinks   = 0x04
)

// openHow is struct open_how of openat2(2).
type openHow struct {
	flags   uint64
	mode    uint64
	resolve uint64
}

// openat2 calls openat2(2); ENOSYS where the kernel lacks it.
func openat2(dirfd int, path string, how *openHow) (int, error) {
	p, err := syscall.BytePtrFromString(path)
	if err != nil {
		return -1, err
	}
	fd, _, errno := syscall.Syscall6(sysOpenat2, uintptr(dirfd), uintptr(unsafe.Pointer(p)), uintptr(unsafe.Pointer(how)), unsafe.Sizeof(*how), 0, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}
