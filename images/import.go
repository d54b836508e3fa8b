package images

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	kgzip "github.com/klauspost/compress/gzip"
)

// Archive formats Import recognizes, as recorded in image.json.
const (
	formatRootfs = "rootfs"
	formatDocker = "docker-archive"
	formatOCI    = "oci-layout"
)

// maxIndexDepth bounds nested image indexes of an OCI layout.
const maxIndexDepth = 4

// Import unpacks the tarball file into the store as name (a name without a
// tag means ":latest") and returns the stored image. file may be gzip
// compressed and holds one of:
//
//   - a plain root-filesystem tarball (the image's Env is then only the
//     default PATH);
//   - a docker-archive, the output of `docker save` (manifest.json plus
//     layers);
//   - an OCI image layout (oci-layout plus index.json and blobs); from an
//     index with several images the one for linux and this machine's
//     architecture is taken.
//
// Every tar stream goes through the defensive extractor: an archive with
// an absolute or ".." entry name, a link out of the root filesystem, a
// write through a symbolic link, a device node or a FIFO is refused with
// an error wrapping [ErrInvalid] that names the entry; setuid and setgid
// bits are stripped; layer whiteouts are applied; a stream of more than
// 2^20 entries, or files adding up to more than 16 GiB (gzip bombs,
// sparse files of huge holes), is refused. Entry owners are kept when the
// process runs as root. The image appears in the store only when
// complete, replacing one of the same name.
//
// progress, when non-nil, is called from the importing goroutine after
// every read of the input file with the bytes read so far and the file's
// size (-1 when it is not a regular file). Cancelling ctx stops the import
// and removes what it wrote.
func (s *Store) Import(ctx context.Context, file, name string, progress func(done, total int64)) (*Image, error) {
	repo, tag, err := s.storedName(name)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("image import: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("image import %s: %w", file, err)
	}
	total := int64(-1)
	if fi.Mode().IsRegular() {
		total = fi.Size()
	}

	staging, release, err := s.stage("import-")
	if err != nil {
		return nil, err
	}
	defer release()

	// Pass 1: unpack the input as it comes, hashing and counting it.
	archiveDir := filepath.Join(staging, "archive")
	sum := sha256.New()
	in := &progressReader{ctx: ctx, r: io.TeeReader(f, sum), total: total, fn: progress}
	compressed, err := unpackOuter(ctx, in, archiveDir)
	if err != nil {
		return nil, fmt.Errorf("image import %s: %w", file, err)
	}

	imageDir := filepath.Join(staging, "image")
	if err := os.Mkdir(imageDir, 0o700); err != nil {
		return nil, fmt.Errorf("image store %s: %w", s.root, err)
	}
	rootfs := filepath.Join(imageDir, rootfsDir)
	rec := record{Name: refString(repo, tag), Imported: time.Now().UTC()}

	format, err := detectFormat(archiveDir)
	if err != nil {
		return nil, fmt.Errorf("image import %s: %w", file, err)
	}
	rec.Format = format
	var img v1.Image
	switch format {
	case formatOCI:
		img, err = ociImage(archiveDir)
	case formatDocker:
		img, err = tarball.Image(reopener(file, compressed), nil)
		if err != nil {
			err = fmt.Errorf("%w: docker-archive: %v", ErrInvalid, err)
		}
	default:
		rec.Digest = "sha256:" + hex.EncodeToString(sum.Sum(nil))
		rec.Env = withPath(nil)
		err = os.Rename(archiveDir, rootfs)
	}
	if err != nil {
		return nil, fmt.Errorf("image import %s: %w", file, err)
	}
	if img != nil {
		if err := unpackImage(ctx, img, rootfs, &rec); err != nil {
			return nil, fmt.Errorf("image import %s (%s): %w", file, format, err)
		}
	}
	return s.finish(ctx, imageDir, &rec, repo, tag, "image import "+file)
}

// finish sizes the root filesystem of the staged image directory
// imageDir, writes its record rec, and publishes it as repo and tag;
// what starts error messages.
func (s *Store) finish(ctx context.Context, imageDir string, rec *record, repo, tag, what string) (*Image, error) {
	var err error
	if rec.Size, err = treeSize(filepath.Join(imageDir, rootfsDir)); err != nil {
		return nil, fmt.Errorf("%s: sizing root filesystem: %w", what, err)
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := os.WriteFile(filepath.Join(imageDir, recordFile), append(data, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := s.publish(imageDir, repo, tag); err != nil {
		return nil, err
	}
	return s.load(repo, tag)
}

// unpackOuter extracts the (possibly gzip-compressed) tar stream r into
// dir, then drains r so that the whole input is read. It reports whether
// the input was gzip-compressed.
func unpackOuter(ctx context.Context, r io.Reader, dir string) (compressed bool, err error) {
	br := bufio.NewReaderSize(r, 64<<10)
	stream, compressed, err := decompress(br)
	if err != nil {
		return false, err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		return false, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return false, err
	}
	defer root.Close()
	x := newExtractor(root)
	if err := x.extract(ctx, stream); err != nil {
		return false, err
	}
	if x.entries == 0 {
		return false, fmt.Errorf("%w: the archive has no entries", ErrInvalid)
	}
	if err := x.finish(); err != nil {
		return false, err
	}
	// Read what follows the end-of-archive marker: it completes the
	// digest and the progress, and verifies the gzip trailer.
	if _, err := io.Copy(io.Discard, stream); err != nil {
		return false, fmt.Errorf("%w: after the end of the archive: %v", ErrInvalid, err)
	}
	if _, err := io.Copy(io.Discard, br); err != nil {
		return false, err
	}
	return compressed, nil
}

// zstdMagic starts a zstd stream.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// decompress returns a reader of the tar stream in br, unwrapping gzip.
// Other compressions are refused with a message naming them.
func decompress(br *bufio.Reader) (io.Reader, bool, error) {
	magic, err := br.Peek(6)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, false, err
	}
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		// klauspost's inflate is about twice the standard library's.
		zr, err := kgzip.NewReader(br)
		if err != nil {
			return nil, false, fmt.Errorf("%w: gzip: %v", ErrInvalid, err)
		}
		return zr, true, nil
	case bytes.HasPrefix(magic, zstdMagic):
		return nil, false, fmt.Errorf("%w: zstd-compressed input; only plain or gzip-compressed tarballs are supported", ErrInvalid)
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return nil, false, fmt.Errorf("%w: xz-compressed input; only plain or gzip-compressed tarballs are supported", ErrInvalid)
	case bytes.HasPrefix(magic, []byte("BZh")):
		return nil, false, fmt.Errorf("%w: bzip2-compressed input; only plain or gzip-compressed tarballs are supported", ErrInvalid)
	}
	return br, false, nil
}

// detectFormat tells the archive formats apart by their marker files at
// the top of the unpacked outer archive.
func detectFormat(dir string) (string, error) {
	isFile := func(name string) bool {
		fi, err := os.Lstat(filepath.Join(dir, name))
		return err == nil && fi.Mode().IsRegular()
	}
	switch {
	case isFile("oci-layout") && isFile("index.json"):
		// The layout is read by path from the host file system, so no
		// symbolic link of the archive may take part in it.
		if err := refuseSymlinks(dir); err != nil {
			return "", err
		}
		return formatOCI, nil
	case isFile("manifest.json"):
		return formatDocker, nil
	}
	return formatRootfs, nil
}

// refuseSymlinks fails on the first symbolic link below dir.
func refuseSymlinks(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			rel, _ := filepath.Rel(dir, p)
			return fmt.Errorf("%w: OCI layout entry %q is a symbolic link", ErrInvalid, rel)
		}
		return nil
	})
}

// reopener opens the input file again for go-containerregistry's
// docker-archive reader, which scans the tarball once per lookup.
func reopener(file string, compressed bool) tarball.Opener {
	return func() (io.ReadCloser, error) {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		if !compressed {
			return f, nil
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			f.Close()
			return nil, err
		}
		return &gzipFile{Reader: zr, f: f}, nil
	}
}

type gzipFile struct {
	*gzip.Reader
	f *os.File
}

func (g *gzipFile) Close() error {
	err := g.Reader.Close()
	if ferr := g.f.Close(); err == nil {
		err = ferr
	}
	return err
}

// ociImage picks the image of an OCI layout directory: from index.json
// (and nested indexes), the first manifest whose platform is
// linux/GOARCH, else one without a platform, else any other whose
// configuration can be read.
func ociImage(dir string) (v1.Image, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: OCI layout: %v", ErrInvalid, err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return nil, fmt.Errorf("%w: OCI layout: %v", ErrInvalid, err)
	}
	img, err := pickImage(idx, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: OCI layout: %v", ErrInvalid, err)
	}
	return img, nil
}

func pickImage(idx v1.ImageIndex, depth int) (v1.Image, error) {
	if depth > maxIndexDepth {
		return nil, fmt.Errorf("image indexes nested more than %d deep", maxIndexDepth)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	var tried []error
	for rank := 0; rank < 3; rank++ {
		for _, desc := range m.Manifests {
			if platformRank(desc.Platform) != rank {
				continue
			}
			var img v1.Image
			var err error
			switch {
			case desc.MediaType.IsIndex():
				var child v1.ImageIndex
				if child, err = idx.ImageIndex(desc.Digest); err == nil {
					img, err = pickImage(child, depth+1)
				}
			case desc.MediaType.IsImage():
				if img, err = idx.Image(desc.Digest); err == nil {
					_, err = img.ConfigFile()
				}
			default:
				continue
			}
			if err == nil {
				return img, nil
			}
			tried = append(tried, fmt.Errorf("manifest %s: %w", desc.Digest, err))
		}
	}
	if len(tried) == 0 {
		return nil, errors.New("index.json lists no image")
	}
	return nil, errors.Join(tried...)
}

// platformRank orders index entries: 0 for linux on this architecture, 1
// for no platform, 2 for any other.
func platformRank(p *v1.Platform) int {
	switch {
	case p == nil:
		return 1
	case p.OS == "linux" && p.Architecture == runtime.GOARCH:
		return 0
	}
	return 2
}

// unpackImage extracts img's layers in order into a new directory rootfs
// and fills rec's digest, environment and creation time from the image.
func unpackImage(ctx context.Context, img v1.Image, rootfs string, rec *record) error {
	cfg, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("%w: image configuration: %v", ErrInvalid, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return fmt.Errorf("%w: image manifest: %v", ErrInvalid, err)
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("%w: image layers: %v", ErrInvalid, err)
	}
	root, err := newRootfs(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	x := newExtractor(root)
	for i, l := range layers {
		if err := extractLayer(ctx, x, l); err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
	}
	if err := x.finish(); err != nil {
		return err
	}
	rec.Digest = digest.String()
	rec.Env = withPath(cfg.Config.Env)
	rec.Created = cfg.Created.UTC()
	return nil
}

// newRootfs makes the directory rootfs (0755, whatever the umask) and
// opens it for an extractor.
func newRootfs(rootfs string) (*os.Root, error) {
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		return nil, err
	}
	if err := os.Chmod(rootfs, 0o755); err != nil {
		return nil, err
	}
	return os.OpenRoot(rootfs)
}

func extractLayer(ctx context.Context, x *extractor, l v1.Layer) error {
	rc, err := l.Uncompressed()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	defer rc.Close()
	if err := x.extract(ctx, rc); err != nil {
		return err
	}
	// Reading to the end lets go-containerregistry check the layer
	// (compressed streams verify their trailers).
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return nil
}

// progressReader counts bytes read, reports them and stops on
// cancellation.
type progressReader struct {
	ctx   context.Context
	r     io.Reader
	done  int64
	total int64
	fn    func(done, total int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	if err := p.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := p.r.Read(b)
	if n > 0 {
		p.done += int64(n)
		if p.fn != nil {
			p.fn(p.done, p.total)
		}
	}
	return n, err
}
