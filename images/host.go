package images

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
)

// hostDirs are the host directories the host image shows read-only at the
// same path: bound when they are directories, recreated as symbolic links
// when they are links (merged-/usr systems link /bin to usr/bin).
var hostDirs = []string{"/usr", "/bin", "/lib", "/lib64", "/lib32", "/libx32", "/sbin"}

// hostEtc are the host files and directories below /etc that the host
// image binds read-only over its generated /etc. /etc/ssl is bound child
// by child so that /etc/ssl/private (private keys) stays out.
var hostEtc = []string{"alternatives", "ssl", "ca-certificates", "ld.so.cache", "localtime"}

// sslPrivate is the child of /etc/ssl that is never bound.
const sslPrivate = "private"

// forbiddenSources are host paths no bind of the host image may expose,
// nor anything below them.
var forbiddenSources = []string{"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/sudoers.d", "/root", "/home"}

// Sandbox user names in the generated /etc/passwd.
const (
	sandboxUser = "sandbox"
	nobodyID    = 65534
)

// Host returns the host image for calls that run as uid:gid: read-only
// binds of the host's /usr, /bin, /lib, /lib64, /lib32, /libx32 and /sbin
// (those that exist; the ones that are symbolic links appear in Symlinks
// instead), a generated /etc, and read-only binds of the host's
// /etc/alternatives, /etc/ssl (without /etc/ssl/private),
// /etc/ca-certificates, /etc/ld.so.cache and /etc/localtime (its link
// resolved) over it. It never exposes /etc/shadow, /etc/sudoers, /root or
// /home. Env is the default PATH and HOME=/tmp.
//
// The generated /etc holds passwd and group naming root, the sandbox user
// ("sandbox" with uid:gid and home /tmp; root itself, with home /tmp, when
// uid is 0; "nobody" when uid is 65534) and nobody, hosts (localhost),
// nsswitch.conf (files only) and the mount points of the binds above. It
// is cached in stateDir/host/etc-<uid>-<gid> (directories 0700 up to it,
// the cache itself world-readable so the sandbox user can read it) and
// rebuilt atomically when its content is not what this host needs now.
// Host is safe for concurrent use, also by several processes.
func Host(stateDir string, uid, gid uint32) (*Image, error) {
	return hostImage("/", stateDir, uid, gid)
}

// hostImage is Host with the host's file system rooted at hostRoot, so
// that tests can use a fake host.
func hostImage(hostRoot, stateDir string, uid, gid uint32) (*Image, error) {
	if stateDir == "" {
		return nil, fmt.Errorf("%w: empty state directory for the host image", ErrInvalid)
	}
	stateDir, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, fmt.Errorf("host image: state directory %q: %w", stateDir, err)
	}
	img := &Image{
		Name:     HostName,
		Host:     true,
		Env:      []string{"PATH=" + DefaultPath, "HOME=/tmp"},
		Symlinks: make(map[string]string),
	}
	dirBinds, err := hostDirBinds(hostRoot, img.Symlinks)
	if err != nil {
		return nil, err
	}
	entries, etcBinds, err := hostEtcBinds(hostRoot, etcFiles(uid, gid))
	if err != nil {
		return nil, err
	}
	etcDir, err := ensureEtc(filepath.Join(stateDir, "host"), fmt.Sprintf("etc-%d-%d", uid, gid), entries)
	if err != nil {
		return nil, err
	}
	// The generated /etc comes first: the other /etc binds land on its
	// mount points. It lives in the state directory and is exempt from
	// the check below (the state directory may well be below /root).
	host := append(dirBinds, etcBinds...)
	for _, b := range host {
		if forbidden(b.Source, hostRoot) || forbidden(b.Target, "/") {
			return nil, fmt.Errorf("host image: refusing to bind %s at %s", b.Source, b.Target)
		}
	}
	img.Binds = append([]Bind{{Source: etcDir, Target: "/etc"}}, host...)
	return img, nil
}

// hostDirBinds are the binds of the hostDirs that are directories under
// hostRoot; the ones that are symbolic links are added to symlinks (path
// to link text) instead, and missing ones are left out.
func hostDirBinds(hostRoot string, symlinks map[string]string) ([]Bind, error) {
	onHost := func(p string) string { return filepath.Join(hostRoot, p) }
	var binds []Bind
	for _, d := range hostDirs {
		fi, err := os.Lstat(onHost(d))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return nil, fmt.Errorf("host image: %w", err)
		case fi.Mode()&fs.ModeSymlink != 0:
			text, err := os.Readlink(onHost(d))
			if err != nil {
				return nil, fmt.Errorf("host image: %w", err)
			}
			symlinks[d] = text
		case fi.IsDir():
			binds = append(binds, Bind{Source: onHost(d), Target: d})
		}
	}
	return binds, nil
}

// hostEtcBinds are the binds of the hostEtc files under hostRoot that
// exist (bindSource), /etc/ssl child by child without sslPrivate, and
// entries with the mount point of each (and /etc/ssl itself) appended.
func hostEtcBinds(hostRoot string, entries []etcEntry) ([]etcEntry, []Bind, error) {
	var binds []Bind
	addEtc := func(rel, source string, dir bool) {
		entries = append(entries, etcEntry{name: rel, dir: dir})
		binds = append(binds, Bind{Source: source, Target: "/etc/" + rel})
	}
	for _, name := range hostEtc {
		source, dir, ok := bindSource(hostRoot, "/etc/"+name)
		if !ok {
			continue
		}
		if name != "ssl" || !dir {
			addEtc(name, source, dir)
			continue
		}
		children, err := os.ReadDir(source)
		if err != nil {
			return nil, nil, fmt.Errorf("host image: %w", err)
		}
		entries = append(entries, etcEntry{name: "ssl", dir: true})
		for _, c := range children {
			if c.Name() == sslPrivate {
				continue
			}
			if src, cdir, ok := bindSource(hostRoot, "/etc/ssl/"+c.Name()); ok {
				addEtc("ssl/"+c.Name(), src, cdir)
			}
		}
	}
	return entries, binds, nil
}

// bindSource resolves the host path p (under hostRoot) to what a bind of
// it should use: its final target when it is a symbolic link, whether it
// is a directory, and false when it is missing, neither a directory nor a
// regular file, or lies somewhere forbidden.
func bindSource(hostRoot, p string) (source string, dir, ok bool) {
	resolved, err := filepath.EvalSymlinks(filepath.Join(hostRoot, p))
	if err != nil {
		return "", false, false
	}
	fi, err := os.Stat(resolved)
	if err != nil || !(fi.IsDir() || fi.Mode().IsRegular()) {
		return "", false, false
	}
	if forbidden(resolved, hostRoot) {
		return "", false, false
	}
	return resolved, fi.IsDir(), true
}

// forbidden reports whether p (an absolute path on the host whose root is
// hostRoot) is, or lies below, one of forbiddenSources.
func forbidden(p, hostRoot string) bool {
	for _, f := range forbiddenSources {
		f = filepath.Join(hostRoot, f)
		if p == f || strings.HasPrefix(p, f+"/") {
			return true
		}
	}
	return false
}

// etcEntry is one file or directory of the generated /etc.
type etcEntry struct {
	name string // relative to the generated directory, "/"-separated
	dir  bool
	data string // content of a file; empty for a mount point
}

// etcFiles returns the generated files of /etc for uid:gid.
func etcFiles(uid, gid uint32) []etcEntry {
	u, g := strconv.FormatUint(uint64(uid), 10), strconv.FormatUint(uint64(gid), 10)
	var passwd, group strings.Builder
	switch uid {
	case 0:
		passwd.WriteString("root:x:0:0:root:/tmp:/bin/sh\n")
	default:
		passwd.WriteString("root:x:0:0:root:/root:/bin/sh\n")
		if uid != nobodyID {
			passwd.WriteString(sandboxUser + ":x:" + u + ":" + g + ":" + sandboxUser + ":/tmp:/bin/sh\n")
		}
	}
	if uid == nobodyID {
		passwd.WriteString("nobody:x:65534:" + g + ":nobody:/tmp:/bin/sh\n")
	} else {
		passwd.WriteString("nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
	}
	group.WriteString("root:x:0:\n")
	if gid != 0 && gid != nobodyID {
		group.WriteString(sandboxUser + ":x:" + g + ":\n")
	}
	group.WriteString("nogroup:x:65534:\n")
	return []etcEntry{
		{name: "group", data: group.String()},
		{name: "hosts", data: "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
		{name: "nsswitch.conf", data: "passwd: files\ngroup: files\nshadow: files\nhosts: files\nnetworks: files\nprotocols: files\nservices: files\n"},
		{name: "passwd", data: passwd.String()},
	}
}

// ensureEtc returns parent/name holding exactly entries, building it in a
// temporary directory and renaming it into place when it is missing or
// differs.
func ensureEtc(parent, name string, entries []etcEntry) (string, error) {
	dst := filepath.Join(parent, name)
	if etcMatches(dst, entries) {
		return dst, nil
	}
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return "", fmt.Errorf("host image: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, name+".tmp-")
	if err != nil {
		return "", fmt.Errorf("host image: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := writeEtc(tmp, entries); err != nil {
		return "", fmt.Errorf("host image: generating %s: %w", dst, err)
	}
	for attempt := 0; attempt < 3; attempt++ {
		// Move a stale copy aside; calls that have it mounted keep it.
		// A copy another process published since the check above fits:
		// moving that aside would unlink the directory its calls staged
		// their bind from, and their mounts would fail. (A copy that
		// exists and does not fit is stale: no process renames one into
		// place while it is there.)
		if _, err := os.Lstat(dst); err == nil {
			if etcMatches(dst, entries) {
				return dst, nil
			}
			aside, err := os.MkdirTemp(parent, name+".old-")
			if err != nil {
				return "", fmt.Errorf("host image: %w", err)
			}
			if err := os.Rename(dst, filepath.Join(aside, "etc")); err != nil && !errors.Is(err, fs.ErrNotExist) {
				os.RemoveAll(aside)
				return "", fmt.Errorf("host image: %w", err)
			}
			os.RemoveAll(aside)
		}
		err := os.Rename(tmp, dst)
		if err == nil {
			return dst, nil
		}
		if !(errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY)) {
			return "", fmt.Errorf("host image: %w", err)
		}
		// Another process published one meanwhile; take it if it fits.
		if etcMatches(dst, entries) {
			return dst, nil
		}
	}
	return "", fmt.Errorf("host image: %s keeps changing under concurrent updates", dst)
}

// writeEtc creates entries in the empty directory dir: directories 0755,
// files 0644 (mount points are empty files).
func writeEtc(dir string, entries []etcEntry) error {
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	sorted := append([]etcEntry(nil), entries...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	for _, e := range sorted {
		p := filepath.Join(dir, filepath.FromSlash(e.name))
		if e.dir {
			if err := os.Mkdir(p, 0o755); err != nil {
				return err
			}
			if err := os.Chmod(p, 0o755); err != nil {
				return err
			}
			continue
		}
		if err := os.WriteFile(p, []byte(e.data), 0o644); err != nil {
			return err
		}
		if err := os.Chmod(p, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// etcMatches reports whether dir holds exactly entries, with their
// content and modes.
func etcMatches(dir string, entries []etcEntry) bool {
	want := make(map[string]etcEntry, len(entries))
	for _, e := range entries {
		want[e.name] = e
	}
	fi, err := os.Lstat(dir)
	if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o755 {
		return false
	}
	seen := 0
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		e, ok := want[filepath.ToSlash(rel)]
		if !ok {
			return errMismatch
		}
		seen++
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case e.dir:
			if !info.IsDir() || info.Mode().Perm() != 0o755 {
				return errMismatch
			}
		case !info.Mode().IsRegular() || info.Mode().Perm() != 0o644 || info.Size() != int64(len(e.data)):
			return errMismatch
		case e.data != "":
			data, err := os.ReadFile(p)
			if err != nil || string(data) != e.data {
				return errMismatch
			}
		}
		return nil
	})
	return err == nil && seen == len(want)
}

var errMismatch = errors.New("generated /etc differs")
