package images

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/zstd"
)

// formatRegistry is the record format of pulled images.
const formatRegistry = "registry"

// DefaultMaxPullBytes bounds the compressed bytes (layers plus
// configuration) of one pull when PullOptions.MaxBytes is 0: 8 GiB.
const DefaultMaxPullBytes = 8 << 30

// PullOptions configure a pull from a registry (images/registry's Pull
// and Resolve, and the backends' PullImage).
type PullOptions struct {
	// Registries holds the operator's credentials and plain-HTTP
	// registries; nil pulls anonymously over HTTPS.
	Registries *Registries
	// MaxBytes bounds the compressed size of the image, as its manifest
	// declares it and as read; 0 means DefaultMaxPullBytes. A larger
	// image fails before any layer is fetched.
	MaxBytes int64
	// Keys, when not empty, are the public keys of which one must have
	// signed the image (cosign's key-based signatures, see
	// images/registry.VerifySignature); an image without such a
	// signature fails before
	// any layer is fetched.
	Keys []PublicKey
	// Progress, when non-nil, receives the pull's events from the
	// pulling goroutine.
	Progress func(PullEvent)
}

// PullEvent is one step of a pull, for progress displays and --json
// event streams.
type PullEvent struct {
	// Event is "resolved" (the reference's digest is known), "verified"
	// (a signature checked out), "layer" (bytes of a layer were read;
	// also sent once when a layer starts) or "stored" (the image is in
	// the store).
	Event string `json:"event"`
	// Reference is the canonical reference pulled; Digest what it
	// resolved to.
	Reference string `json:"reference"`
	Digest    string `json:"digest,omitempty"`
	// Layer is the layer's digest, Index its position (from 1) among
	// Layers; Done and Total are its bytes read and declared size.
	Layer  string `json:"layer,omitempty"`
	Index  int    `json:"index,omitempty"`
	Layers int    `json:"layers,omitempty"`
	Done   int64  `json:"done,omitempty"`
	Total  int64  `json:"total,omitempty"`
	// Signer is the fingerprint of the key that verified ("verified").
	Signer string `json:"signer,omitempty"`
}

// Layer is a layer of a registry image as its manifest declares it.
type Layer struct {
	// Blob reads the layer; Digest and Size are its declared digest
	// ("sha256:…") and compressed size.
	Blob   v1.Layer
	Digest string
	Size   int64
}

// Remote is an image in a registry, resolved and checked by the
// registry client (images/registry), that [Store.AddRemote] stores.
type Remote struct {
	// Name is the canonical reference the image is stored under.
	Name string
	// Source, Digest and Signers are recorded as the image's Source,
	// Digest and Signers.
	Source  string
	Digest  string
	Signers []string
	// Image is the platform image, whose configuration is read; Layers
	// are its layers, in order.
	Image  v1.Image
	Layers []Layer
	// Failed classifies a failure while the configuration and layers are
	// read and unpacked (the registry client's errors among them); nil
	// returns it as it is.
	Failed func(error) error
}

// AddRemote stores r under r.Name and returns the stored image. When the
// store already holds r's content from r.Source under that name, signed
// by at least r.Signers, it returns that image and reads nothing. Each
// layer and the configuration are read once; every layer is checked
// against its declared digest and size as it is read, and the image
// appears in the store only when all of it checked out. progress gets
// each layer's index (from 0) and its bytes read so far, once with 0
// when the layer starts.
//
// Errors wrap [ErrInvalid] for a name the store refuses (see
// [ValidateReference]); the failures of reading and unpacking go
// through r.Failed.
func (s *Store) AddRemote(ctx context.Context, r Remote, progress func(layer int, done int64)) (*Image, error) {
	repo, tag, err := s.storedRef(r.Name)
	if err != nil {
		return nil, err
	}
	if old, err := s.load(repo, tag); err == nil && old.Digest == r.Digest && old.Source == r.Source &&
		!slices.ContainsFunc(r.Signers, func(f string) bool { return !slices.Contains(old.Signers, f) }) {
		return old, nil
	}
	staging, release, err := s.stage("pull-")
	if err != nil {
		return nil, err
	}
	defer release()
	imageDir := filepath.Join(staging, "image")
	if err := os.Mkdir(imageDir, 0o700); err != nil {
		return nil, fmt.Errorf("image store %s: %w", s.root, err)
	}
	rootfs := filepath.Join(imageDir, rootfsDir)
	rec := record{Name: r.Name, Format: formatRegistry, Source: r.Source, Signers: r.Signers}
	if err := unpackRemote(ctx, r.Image, r.Layers, rootfs, &rec, progress); err != nil {
		if r.Failed != nil {
			err = r.Failed(err)
		}
		return nil, err
	}
	rec.Digest = r.Digest
	rec.Imported = time.Now().UTC()
	return s.finish(ctx, imageDir, &rec, repo, tag, "image pull "+r.Name)
}

// unpackRemote reads img's configuration and extracts its layers in
// order into a new directory rootfs, filling rec's environment and
// creation time. progress gets each layer's bytes read so far.
func unpackRemote(ctx context.Context, img v1.Image, layers []Layer, rootfs string, rec *record, progress func(i int, done int64)) error {
	cfg, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("image configuration: %w", err)
	}
	root, err := newRootfs(rootfs)
	if err != nil {
		return err
	}
	defer root.Close()
	x := newExtractor(root)
	for i, l := range layers {
		progress(i, 0)
		if err := pullLayer(ctx, x, l, func(done int64) { progress(i, done) }); err != nil {
			return fmt.Errorf("layer %d (%s): %w", i+1, l.Digest, err)
		}
	}
	if err := x.finish(); err != nil {
		return err
	}
	rec.Env = withPath(cfg.Config.Env)
	rec.Created = cfg.Created.UTC()
	return nil
}

// pullLayer fetches one layer and extracts it. The compressed stream is
// hashed as it is read and may not exceed the declared size; a stream
// whose digest is not the layer's is ErrVerify, whatever else failed
// on the way (a tampered layer may first break its decompression).
func pullLayer(ctx context.Context, x *extractor, l Layer, progress func(int64)) error {
	rc, err := l.Blob.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	sum := sha256.New()
	counted := &progressReader{ctx: ctx, r: io.TeeReader(&capReader{r: rc, left: l.Size}, sum), total: l.Size, fn: func(done, _ int64) { progress(done) }}
	br := bufio.NewReaderSize(counted, 64<<10)
	err = extractCompressed(ctx, x, br)
	// Read what is left, so that the digest covers the whole stream.
	if _, derr := io.Copy(io.Discard, br); derr != nil && err == nil {
		err = derr
	}
	if got := "sha256:" + hex.EncodeToString(sum.Sum(nil)); counted.done == l.Size && got != l.Digest {
		return fmt.Errorf("%w: the registry sent content with digest %s (tampered or corrupt)", ErrVerify, got)
	}
	if err == nil && counted.done != l.Size {
		err = fmt.Errorf("%w: the registry sent %d of the %d bytes the manifest declares", ErrVerify, counted.done, l.Size)
	}
	return err
}

// extractCompressed decompresses a layer stream and extracts it.
func extractCompressed(ctx context.Context, x *extractor, br *bufio.Reader) error {
	stream, closeStream, err := decompressLayer(br)
	if err != nil {
		return err
	}
	defer closeStream()
	if err := x.extract(ctx, stream); err != nil {
		return err
	}
	// The end of the compressed stream checks its trailer.
	_, err = io.Copy(io.Discard, stream)
	return err
}

// decompressLayer unwraps a layer's zstd compression, else what
// decompress takes (gzip, or none).
func decompressLayer(br *bufio.Reader) (io.Reader, func(), error) {
	if magic, _ := br.Peek(4); bytes.HasPrefix(magic, zstdMagic) {
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, nil, fmt.Errorf("zstd: %w", err)
		}
		return zr, zr.Close, nil
	}
	r, _, err := decompress(br)
	return r, func() {}, err
}

// capReader fails once more than left bytes are read: a registry may
// not send more than the manifest declared.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.left -= int64(n)
	if c.left < 0 {
		return n, fmt.Errorf("%w: the registry sent more bytes than the manifest declares", ErrVerify)
	}
	return n, err
}
