package images

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
)

// defaultMaxEntries bounds the number of entries of one tar stream (a
// plain root-filesystem tarball, the outer archive, or one layer), so a
// hostile archive of endless empty headers cannot run forever.
const defaultMaxEntries = 1 << 20

// defaultMaxBytes bounds the bytes of regular files one extractor writes
// (over all its streams), so that a small hostile archive (a gzip bomb,
// a sparse file declaring terabytes of holes) cannot fill the disk.
const defaultMaxBytes = 16 << 30

// Whiteout markers of image layers (OCI image-spec, layer.md).
const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// extractor unpacks tar streams into the directory of root. It never
// writes outside root, never follows a symbolic link while writing (an
// entry whose parent is a symbolic link is refused; an existing link at an
// entry's own path is replaced, not followed), refuses names with ".."
// components and absolute names, links that point out of root, device
// nodes and FIFOs, and strips setuid and setgid bits. The zero value is
// not usable; an extractor is not safe for concurrent use.
type extractor struct {
	root *os.Root
	// maxEntries bounds the entries of one stream; 0 means
	// defaultMaxEntries.
	maxEntries int
	// chown applies the entries' owners (only when running as root).
	chown bool
	// maxBytes bounds the regular-file bytes written over all streams;
	// 0 means defaultMaxBytes.
	maxBytes int64
	// entries counts the entries of every stream so far, written the
	// regular-file bytes.
	entries int
	written int64

	// added holds the paths written by the current stream, ancestors
	// their parent directories: whiteouts hide only lower layers' files.
	added     map[string]bool
	ancestors map[string]bool
	// dirModes holds the modes of directory entries, applied by finish
	// so that a read-only directory does not block later entries;
	// dirOrder lists its keys in the order first seen.
	dirModes map[string]fs.FileMode
	dirOrder []string
}

func newExtractor(root *os.Root) *extractor {
	return &extractor{root: root, chown: os.Geteuid() == 0, dirModes: make(map[string]fs.FileMode)}
}

// finish applies the recorded directory modes, deepest first. Call it once
// after the last stream.
func (x *extractor) finish() error {
	dirs := append([]string(nil), x.dirOrder...)
	sort.SliceStable(dirs, func(i, j int) bool {
		return strings.Count(dirs[i], "/") > strings.Count(dirs[j], "/")
	})
	for _, p := range dirs {
		fi, err := x.root.Lstat(p)
		if err != nil || !fi.IsDir() {
			continue // hidden or replaced by a later entry
		}
		if err := x.root.Chmod(p, x.dirModes[p]); err != nil {
			return fmt.Errorf("directory %q: %w", p, err)
		}
	}
	return nil
}

// extract unpacks one tar stream (one layer). Entries of earlier streams
// may be hidden by whiteouts of this one.
func (x *extractor) extract(ctx context.Context, r io.Reader) error {
	x.added = make(map[string]bool)
	x.ancestors = make(map[string]bool)
	limit := x.maxEntries
	if limit <= 0 {
		limit = defaultMaxEntries
	}
	tr := tar.NewReader(r)
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: reading archive after %d entries: %v", ErrInvalid, n, err)
		}
		if n >= limit {
			return fmt.Errorf("%w: archive has more than %d entries", ErrInvalid, limit)
		}
		x.entries++
		if err := x.entry(hdr, tr); err != nil {
			return err
		}
	}
}

// entry writes one tar entry.
func (x *extractor) entry(hdr *tar.Header, body io.Reader) error {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	p, err := entryPath(hdr.Name)
	if err != nil {
		return err
	}
	base := path.Base(p)
	if strings.HasPrefix(base, whiteoutPrefix) {
		return x.whiteout(hdr.Name, p)
	}
	if p == "." {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("%w: entry %q: the archive root must be a directory", ErrInvalid, hdr.Name)
		}
		return x.finishDir(hdr, ".")
	}
	if err := x.prepareParent(hdr.Name, p); err != nil {
		return err
	}
	fi, err := x.root.Lstat(p)
	switch {
	case err == nil && fi.IsDir() && hdr.Typeflag == tar.TypeDir:
		x.markAdded(p)
		return x.finishDir(hdr, p)
	case err == nil:
		// Replace whatever is there; a symbolic link is removed,
		// never followed.
		if err := x.root.RemoveAll(p); err != nil {
			return fmt.Errorf("entry %q: replacing existing file: %w", hdr.Name, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	return x.create(hdr, p, body)
}

// create writes the entry hdr at p, where nothing is, by its type; it
// refuses device nodes, FIFOs and types it does not know.
func (x *extractor) create(hdr *tar.Header, p string, body io.Reader) error {
	switch hdr.Typeflag {
	case tar.TypeDir:
		if err := x.root.Mkdir(p, 0o700); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
		x.markAdded(p)
		return x.finishDir(hdr, p)
	case tar.TypeReg, tar.TypeRegA, tar.TypeCont:
		x.markAdded(p)
		return x.regular(hdr, p, body)
	case tar.TypeSymlink:
		return x.symlink(hdr, p)
	case tar.TypeLink:
		return x.hardlink(hdr, p)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		return fmt.Errorf("%w: entry %q: device nodes and FIFOs are refused", ErrInvalid, hdr.Name)
	default:
		return fmt.Errorf("%w: entry %q: unsupported tar entry type %q", ErrInvalid, hdr.Name, hdr.Typeflag)
	}
}

// symlink writes a symbolic link entry at p, whose target must stay
// inside the root filesystem, with its owner.
func (x *extractor) symlink(hdr *tar.Header, p string) error {
	if err := symlinkInside(p, hdr.Linkname); err != nil {
		return fmt.Errorf("%w: entry %q: %v", ErrInvalid, hdr.Name, err)
	}
	if err := x.root.Symlink(hdr.Linkname, p); err != nil {
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	x.markAdded(p)
	if x.chown {
		if err := x.root.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
	return nil
}

// regular writes a regular file's content, mode, owner and times.
func (x *extractor) regular(hdr *tar.Header, p string, body io.Reader) error {
	limit := x.maxBytes
	if limit <= 0 {
		limit = defaultMaxBytes
	}
	if hdr.Size > limit-x.written {
		return fmt.Errorf("%w: entry %q: the unpacked files would exceed %d bytes", ErrInvalid, hdr.Name, limit)
	}
	x.written += hdr.Size
	// O_EXCL: the path was just cleared, so nothing (and no link) is
	// followed.
	f, err := x.root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	src := &sourceReader{r: body}
	_, err = io.Copy(f, src)
	if src.err != nil {
		err = fmt.Errorf("%w: reading archive: %v", ErrInvalid, src.err)
	}
	if err == nil && x.chown {
		err = f.Chown(hdr.Uid, hdr.Gid)
	}
	if err == nil {
		err = f.Chmod(safeMode(hdr.Mode))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	if !hdr.ModTime.IsZero() {
		if err := x.root.Chtimes(p, hdr.ModTime, hdr.ModTime); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
	return nil
}

// finishDir applies a directory entry's owner and records its mode for
// finish.
func (x *extractor) finishDir(hdr *tar.Header, p string) error {
	if x.chown {
		if err := x.root.Lchown(p, hdr.Uid, hdr.Gid); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
	if _, seen := x.dirModes[p]; !seen {
		x.dirOrder = append(x.dirOrder, p)
	}
	x.dirModes[p] = safeMode(hdr.Mode)
	return nil
}

// hardlink links p to the archive path hdr.Linkname, which must already
// exist inside root and not be a directory.
func (x *extractor) hardlink(hdr *tar.Header, p string) error {
	target, err := entryPath(strings.TrimLeft(hdr.Linkname, "/"))
	if err != nil || target == "." {
		return fmt.Errorf("%w: entry %q: hard link target %q points out of the root filesystem", ErrInvalid, hdr.Name, hdr.Linkname)
	}
	if err := x.checkParents(hdr.Name, target); err != nil {
		return err
	}
	fi, err := x.root.Lstat(target)
	if err != nil {
		return fmt.Errorf("%w: entry %q: hard link target %q: %v", ErrInvalid, hdr.Name, hdr.Linkname, err)
	}
	if fi.IsDir() {
		return fmt.Errorf("%w: entry %q: hard link target %q is a directory", ErrInvalid, hdr.Name, hdr.Linkname)
	}
	if err := x.root.Link(target, p); err != nil {
		return fmt.Errorf("entry %q: %w", hdr.Name, err)
	}
	x.markAdded(p)
	return nil
}

// whiteout applies a whiteout entry: ".wh.NAME" hides NAME and
// ".wh..wh..opq" hides every child of its directory, both only as far as
// they come from earlier streams. Other ".wh..wh." metadata is skipped.
func (x *extractor) whiteout(name, p string) error {
	dir, base := path.Split(p)
	dir = path.Clean(dir)
	if base == whiteoutOpaque {
		if err := x.checkParents(name, path.Join(dir, "x")); err != nil {
			return err
		}
		fi, err := x.root.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("entry %q: %w", name, err)
		}
		if !fi.IsDir() {
			return nil
		}
		return x.removeLowerChildren(name, dir)
	}
	if strings.HasPrefix(base, whiteoutMeta) {
		return nil
	}
	hidden := strings.TrimPrefix(base, whiteoutPrefix)
	if hidden == "" || hidden == "." || hidden == ".." {
		return fmt.Errorf("%w: entry %q: malformed whiteout", ErrInvalid, name)
	}
	target := path.Join(dir, hidden)
	if err := x.checkParents(name, target); err != nil {
		return err
	}
	return x.removeLower(name, target)
}

// removeLower removes p unless it or something below it was written by
// the current stream; then it descends and removes the rest.
func (x *extractor) removeLower(name, p string) error {
	fi, err := x.root.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("entry %q: %w", name, err)
	}
	if !x.added[p] && !x.ancestors[p] {
		if err := x.root.RemoveAll(p); err != nil {
			return fmt.Errorf("entry %q: %w", name, err)
		}
		return nil
	}
	if fi.IsDir() {
		return x.removeLowerChildren(name, p)
	}
	return nil
}

func (x *extractor) removeLowerChildren(name, dir string) error {
	d, err := x.root.Open(dir)
	if err != nil {
		return fmt.Errorf("entry %q: %w", name, err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("entry %q: %w", name, err)
	}
	for _, child := range names {
		if err := x.removeLower(name, path.Join(dir, child)); err != nil {
			return err
		}
	}
	return nil
}

// prepareParent makes sure p's parent directories exist and that none of
// them is a symbolic link.
func (x *extractor) prepareParent(name, p string) error {
	if err := x.checkParents(name, p); err != nil {
		return err
	}
	dir := path.Dir(p)
	if dir == "." {
		return nil
	}
	if err := x.root.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("entry %q: %w", name, err)
	}
	return nil
}

// checkParents refuses p when one of its existing parent directories is a
// symbolic link or not a directory, so nothing is written through a link.
func (x *extractor) checkParents(name, p string) error {
	for i := 0; i < len(p); i++ {
		if p[i] != '/' {
			continue
		}
		parent := p[:i]
		fi, err := x.root.Lstat(parent)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("entry %q: %w", name, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%w: entry %q: parent %q is a symbolic link; refusing to write through it", ErrInvalid, name, parent)
		}
		if !fi.IsDir() {
			return fmt.Errorf("%w: entry %q: parent %q is not a directory", ErrInvalid, name, parent)
		}
	}
	return nil
}

func (x *extractor) markAdded(p string) {
	x.added[p] = true
	for d := path.Dir(p); d != "."; d = path.Dir(d) {
		if x.ancestors[d] {
			break
		}
		x.ancestors[d] = true
	}
}

// entryPath validates an archive entry name and returns it as a clean
// relative path ("." for the archive root). Absolute names and names with
// ".." components are refused.
func entryPath(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: entry with an empty name", ErrInvalid)
	}
	if strings.HasPrefix(name, "/") {
		return "", fmt.Errorf("%w: entry %q: absolute names are refused", ErrInvalid, name)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", fmt.Errorf("%w: entry %q: NUL byte in name", ErrInvalid, name)
	}
	parts := strings.Split(name, "/")
	kept := parts[:0]
	for _, part := range parts {
		switch part {
		case "", ".":
		case "..":
			return "", fmt.Errorf("%w: entry %q: \"..\" components are refused", ErrInvalid, name)
		default:
			kept = append(kept, part)
		}
	}
	if len(kept) == 0 {
		return ".", nil
	}
	return strings.Join(kept, "/"), nil
}

// symlinkInside reports an error when a symbolic link at p with the given
// text would point out of the root filesystem. Absolute texts resolve
// against the root filesystem's root and so stay inside; relative ones
// must not climb above it.
func symlinkInside(p, text string) error {
	if text == "" {
		return errors.New("empty symbolic link target")
	}
	if strings.IndexByte(text, 0) >= 0 {
		return errors.New("NUL byte in symbolic link target")
	}
	if strings.HasPrefix(text, "/") {
		return nil
	}
	resolved := path.Join(path.Dir(p), text)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return fmt.Errorf("symbolic link target %q points out of the root filesystem", text)
	}
	return nil
}

// sourceReader remembers a read error so that a truncated or corrupt
// archive is told apart from a failing write.
type sourceReader struct {
	r   io.Reader
	err error
}

func (s *sourceReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		s.err = err
	}
	return n, err
}

// safeMode keeps the permission and sticky bits of a tar mode and drops
// setuid and setgid.
func safeMode(mode int64) fs.FileMode {
	m := fs.FileMode(mode & 0o777)
	if mode&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m
}
