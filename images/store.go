package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Store layout under the root (every directory 0700):
//
//	<root>/<repository>/<tag>/image.json   the record (name, digest, env, …)
//	<root>/<repository>/<tag>/rootfs/      the unpacked root filesystem
//	<root>/.tmp/                           imports and removals in progress
//
// where <repository> is the canonical repository with "/" written as
// "+" and ":" as "~" (see repoDir): "myorg/tools:1" lives in
// <root>/myorg+tools/1. An image pulled by digest ("x@sha256:<hex>") has
// the directory "@sha256-<hex>" in place of a tag ('@' is in no tag).
const (
	recordFile = "image.json"
	rootfsDir  = "rootfs"
	tmpDir     = ".tmp"
)

// staleTemp is the age after which OpenStore removes leftovers of an
// import or removal that crashed.
const staleTemp = 24 * time.Hour

// Store is a local store of imported images under one directory. Its
// methods are safe for concurrent use; imports of different names run in
// parallel and an import replaces an existing image of the same name
// atomically (a call that already holds the old Rootfs keeps working until
// it ends: the old tree is removed, but open mounts of it stay valid).
// The zero value is not usable: call [OpenStore].
type Store struct {
	root string
	// mu serializes the renames that publish and retire images.
	mu sync.Mutex
}

// record is the content of image.json.
type record struct {
	Name     string    `json:"name"`
	Digest   string    `json:"digest"`
	Format   string    `json:"format"`
	Env      []string  `json:"env"`
	Created  time.Time `json:"created,omitzero"`
	Imported time.Time `json:"imported"`
	Size     int64     `json:"size"`
	// Source and Signers are set for pulled images (Image.Source,
	// Image.Signers).
	Source  string   `json:"source,omitempty"`
	Signers []string `json:"signers,omitempty"`
}

// OpenStore opens the store at root, creating it (mode 0700) when missing
// and tightening an existing root to 0700. It removes leftovers of
// imports that crashed more than a day ago.
func OpenStore(root string) (*Store, error) {
	if root == "" {
		return nil, fmt.Errorf("%w: empty store root", ErrInvalid)
	}
	abs, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("image store root %q: %w", root, err)
	}
	if err := os.MkdirAll(filepath.Join(abs, tmpDir), 0o700); err != nil {
		return nil, fmt.Errorf("image store root %q: %w", abs, err)
	}
	for _, d := range []string{abs, filepath.Join(abs, tmpDir)} {
		if err := os.Chmod(d, 0o700); err != nil {
			return nil, fmt.Errorf("image store root %q: %w", abs, err)
		}
	}
	s := &Store{root: abs}
	s.removeStale(time.Now().Add(-staleTemp))
	return s, nil
}

// Root returns the store's absolute root directory.
func (s *Store) Root() string { return s.root }

// Get returns the stored image called name (a name without a tag means
// ":latest"). name may be a digest reference ("x@sha256:…"): it returns
// the image pulled by that digest, else an image of the repository
// pulled or imported by tag whose digest it is, and never an image of
// another digest. A missing image is an error wrapping [ErrNotFound];
// "host" and malformed names are errors wrapping [ErrInvalid].
func (s *Store) Get(name string) (*Image, error) {
	repo, tag, err := s.storedRef(name)
	if err != nil {
		return nil, err
	}
	img, err := s.load(repo, tag)
	if errors.Is(err, fs.ErrNotExist) && isDigestTag(tag) {
		img, err = s.byDigest(repo, tag[1:])
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %q in %s", ErrNotFound, refString(repo, tag), s.root)
	}
	if err == nil && isDigestTag(tag) && img.Digest != tag[1:] {
		return nil, fmt.Errorf("%w: %q: the stored image has digest %s", ErrVerify, refString(repo, tag), img.Digest)
	}
	return img, err
}

// byDigest returns an image of repo stored under a tag whose digest is
// digest; fs.ErrNotExist when there is none.
func (s *Store) byDigest(repo, digest string) (*Image, error) {
	tags, err := os.ReadDir(filepath.Join(s.root, repoDir(repo)))
	if err != nil {
		return nil, fs.ErrNotExist
	}
	for _, t := range tags {
		tag, ok := dirTag(t.Name())
		if !t.IsDir() || !ok || isDigestTag(tag) {
			continue
		}
		if img, err := s.load(repo, tag); err == nil && img.Digest == digest {
			return img, nil
		}
	}
	return nil, fs.ErrNotExist
}

// List returns every stored image sorted by name. Entries that are not
// images (foreign files, malformed names) are skipped; an unreadable
// record is an error naming its file.
func (s *Store) List() ([]Image, error) {
	repos, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("image store %s: %w", s.root, err)
	}
	var out []Image
	for _, r := range repos {
		repo, ok := dirRepo(r.Name())
		if !r.IsDir() || !ok || repo == HostName {
			continue
		}
		tags, err := os.ReadDir(filepath.Join(s.root, r.Name()))
		if err != nil {
			return nil, fmt.Errorf("image store %s: %w", s.root, err)
		}
		for _, t := range tags {
			tag, ok := dirTag(t.Name())
			if !t.IsDir() || !ok {
				continue
			}
			img, err := s.load(repo, tag)
			if errors.Is(err, fs.ErrNotExist) {
				continue // retired between ReadDir and load
			}
			if err != nil {
				return nil, err
			}
			out = append(out, *img)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ErrInUse is the class of errors of [Store.Remove] for an image whose
// root filesystem a running container has mounted.
var ErrInUse = errors.New("image in use")

// Remove deletes the stored image called name (a name without a tag
// means ":latest"). A missing image is an error wrapping [ErrNotFound];
// an image whose root filesystem is the lower directory of an overlay
// mount in any mount namespace of the host (a running call of the oci
// backend) is refused with an error wrapping [ErrInUse]. Mount
// namespaces of processes the caller may not inspect are not seen.
func (s *Store) Remove(name string) error {
	repo, tag, err := s.storedRef(name)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rootfs := filepath.Join(s.root, repoDir(repo), tagDir(tag), rootfsDir)
	if pid := overlayUser(rootfs); pid != 0 {
		return fmt.Errorf("%w: %q: a running container (process %d) has its root filesystem mounted", ErrInUse, refString(repo, tag), pid)
	}
	old, err := s.retire(repo, tag)
	if err != nil {
		return err
	}
	if old == "" {
		return fmt.Errorf("%w: %q in %s", ErrNotFound, refString(repo, tag), s.root)
	}
	_ = os.Remove(filepath.Join(s.root, repoDir(repo))) // only when empty
	return removeTree(old)
}

// storedName validates and splits a name of a stored image (no
// digest: imports name images by tag).
func (s *Store) storedName(name string) (repo, tag string, err error) {
	return splitStored(name, false)
}

// storedRef is storedName that also takes a digest reference, whose
// "tag" is then "@sha256:…".
func (s *Store) storedRef(name string) (repo, tag string, err error) {
	return splitStored(name, true)
}

// ValidateReference checks ref (a name, or a name with a digest) as the
// store takes it: the name grammar, and "host", the generated host
// image, is refused. The error wraps [ErrInvalid] and quotes ref.
func ValidateReference(ref string) error {
	_, _, err := splitStored(ref, true)
	return err
}

// splitStored is splitName for a stored image: "host" is refused, and
// the tag defaults to "latest".
func splitStored(name string, digest bool) (repo, tag string, err error) {
	repo, tag, err = splitName(name, digest)
	if err != nil {
		return "", "", err
	}
	if repo == HostName {
		return "", "", fmt.Errorf("%w: name %q: %q is reserved for the generated host image", ErrInvalid, name, HostName)
	}
	if tag == "" {
		tag = defaultTag
	}
	return repo, tag, nil
}

// load reads one image's record. A missing record is returned as is
// (fs.ErrNotExist).
func (s *Store) load(repo, tag string) (*Image, error) {
	dir := filepath.Join(s.root, repoDir(repo), tagDir(tag))
	data, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		return nil, err
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("image record %s: %w", filepath.Join(dir, recordFile), err)
	}
	if want := refString(repo, tag); rec.Name != want {
		return nil, fmt.Errorf("image record %s: name %q, want %q", filepath.Join(dir, recordFile), rec.Name, want)
	}
	rootfs := filepath.Join(dir, rootfsDir)
	if fi, err := os.Lstat(rootfs); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("image %q: root filesystem %s is missing", rec.Name, rootfs)
	}
	return &Image{
		Name:     rec.Name,
		Rootfs:   rootfs,
		Env:      rec.Env,
		Digest:   rec.Digest,
		Size:     rec.Size,
		Created:  rec.Created,
		Imported: rec.Imported,
		Source:   rec.Source,
		Signers:  rec.Signers,
	}, nil
}

// publish moves the finished image directory src to its place, retiring
// an image of the same name. Callers hold no lock.
func (s *Store) publish(src, repo, tag string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.MkdirAll(filepath.Join(s.root, repoDir(repo)), 0o700); err != nil {
		return fmt.Errorf("image store %s: %w", s.root, err)
	}
	dst := filepath.Join(s.root, repoDir(repo), tagDir(tag))
	// Another process may publish the same name between retire and
	// rename; try a few times, last writer wins.
	for attempt := 0; ; attempt++ {
		old, err := s.retire(repo, tag)
		if err != nil {
			return err
		}
		err = os.Rename(src, dst)
		if old != "" {
			_ = removeTree(old)
		}
		if err == nil {
			return nil
		}
		if attempt == 2 || !(errors.Is(err, syscall.EEXIST) || errors.Is(err, syscall.ENOTEMPTY)) {
			return fmt.Errorf("image store: publishing %q: %w", refString(repo, tag), err)
		}
	}
}

// retire moves an existing image directory out of the way and returns
// where it went ("" when there was none). The caller removes it.
func (s *Store) retire(repo, tag string) (string, error) {
	dst := filepath.Join(s.root, repoDir(repo), tagDir(tag))
	if _, err := os.Lstat(dst); errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	aside, err := os.MkdirTemp(filepath.Join(s.root, tmpDir), "remove-")
	if err != nil {
		return "", fmt.Errorf("image store %s: %w", s.root, err)
	}
	old := filepath.Join(aside, "image")
	if err := os.Rename(dst, old); err != nil {
		_ = os.Remove(aside)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		return "", fmt.Errorf("image store: retiring %q: %w", refString(repo, tag), err)
	}
	return aside, nil
}

// isDigestTag reports whether a tag of storedRef is a digest.
func isDigestTag(tag string) bool { return strings.HasPrefix(tag, "@") }

// refString is the canonical reference of a repository and a tag of
// storedRef: "x:1" or "x@sha256:…".
func refString(repo, tag string) string {
	if isDigestTag(tag) {
		return repo + tag
	}
	return repo + ":" + tag
}

// tagDir is the directory of a tag of storedRef: the tag, or
// "@sha256-<hex>" for a digest (no ':' in a directory an overlay mount
// names).
func tagDir(tag string) string { return strings.Replace(tag, ":", "-", 1) }

// dirTag is the tag of storedRef a directory stands for; false when it
// stands for none.
func dirTag(dir string) (string, bool) {
	if d, ok := strings.CutPrefix(dir, "@sha256-"); ok {
		tag := "@sha256:" + d
		return tag, validDigest(tag[1:])
	}
	return dir, validTag(dir)
}

// stage makes a staging directory for an import or pull (prefix names
// it) and holds an exclusive flock on it until release, so that
// [Store.ReapStaging] of another process leaves it alone while this one
// lives; release also removes it.
func (s *Store) stage(prefix string) (dir string, release func(), err error) {
	dir, err = os.MkdirTemp(filepath.Join(s.root, tmpDir), prefix)
	if err != nil {
		return "", nil, fmt.Errorf("image store %s: %w", s.root, err)
	}
	f, err := os.Open(dir)
	if err == nil {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		_ = removeTree(dir)
		return "", nil, fmt.Errorf("image store %s: locking %s: %w", s.root, dir, err)
	}
	return dir, func() {
		_ = removeTree(dir)
		f.Close()
	}, nil
}

// ReapStaging removes what imports and pulls of dead processes left in
// the store's staging directory (a process that crashed or was killed
// mid-pull), and images retired by a publish or removal that did not
// finish; staging directories of live imports and pulls (their flock is
// held) are left alone. It returns the paths removed.
func (s *Store) ReapStaging() ([]string, error) {
	dir := filepath.Join(s.root, tmpDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("image store %s: %w", s.root, err)
	}
	var removed []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		busy := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) != nil
		if !busy {
			if err := removeTree(p); err == nil {
				removed = append(removed, p)
			}
		}
		f.Close()
	}
	return removed, nil
}

// removeStale deletes entries of the temporary directory last modified
// before cutoff. Errors are ignored: leftovers are retried next time.
func (s *Store) removeStale(cutoff time.Time) {
	dir := filepath.Join(s.root, tmpDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil || fi.ModTime().After(cutoff) {
			continue
		}
		_ = removeTree(filepath.Join(dir, e.Name()))
	}
}

// overlayUser returns a process in whose mount namespace an overlay
// mount has lower as one of its lower directories, 0 when none is seen.
// Each mount namespace is read once.
func overlayUser(lower string) int {
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	seen := map[string]bool{}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		ns, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns", "mnt"))
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		data, err := os.ReadFile(filepath.Join("/proc", p.Name(), "mountinfo"))
		if err != nil {
			continue
		}
		if hasOverlayLower(string(data), lower) {
			return pid
		}
	}
	return 0
}

// hasOverlayLower reports whether the mountinfo text lists an overlay
// mount with lower among its lower directories.
func hasOverlayLower(mountinfo, lower string) bool {
	for _, line := range strings.Split(mountinfo, "\n") {
		_, after, ok := strings.Cut(line, " - ")
		f := strings.Fields(after)
		if !ok || len(f) < 3 || f[0] != "overlay" {
			continue
		}
		for _, opt := range strings.Split(f[2], ",") {
			if dirs, ok := strings.CutPrefix(opt, "lowerdir="); ok && slices.Contains(strings.Split(dirs, ":"), lower) {
				return true
			}
		}
	}
	return false
}

// removeTree removes dir and everything below it, making read-only
// directories writable first when a plain removal fails (an unprivileged
// process cannot empty a 0555 directory of an image).
func removeTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// treeSize sums the sizes of the regular files below dir, counting each
// hard-linked file once.
func treeSize(dir string) (int64, error) {
	type inode struct{ dev, ino uint64 }
	seen := make(map[inode]bool)
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
			key := inode{uint64(st.Dev), st.Ino}
			if seen[key] {
				return nil
			}
			seen[key] = true
		}
		total += fi.Size()
		return nil
	})
	return total, err
}

// hasPath reports whether env has a PATH entry.
func hasPath(env []string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, "PATH=") {
			return true
		}
	}
	return false
}

// withPath returns env with DefaultPath prepended when it has no PATH.
func withPath(env []string) []string {
	if hasPath(env) {
		return append([]string(nil), env...)
	}
	return append([]string{"PATH=" + DefaultPath}, env...)
}
