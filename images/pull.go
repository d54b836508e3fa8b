package images

import (
	"bufio"
	"bytes"

	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/klauspost/compress/zstd"
)

// formatRegistry is the record format of pulled images.
const formatRegistry = "registry"

// DefaultMaxPullBytes bounds the compressed bytes (layers plus
// configuration) of one pull when PullOptions.MaxBytes is 0: 8 GiB.
const DefaultMaxPullBytes = 8 << 30

// PullOptions configure [Store.Pull].
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
	// [VerifySignature]); an image without such a signature fails before
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

// Pull fetches ref ("repository:tag" or "repository@sha256:…", in any
// spelling [CanonicalReference] takes) from its registry into the store,
// under that canonical reference, and returns the stored image. A pull
// by digest gets exactly that image: a registry answering with other
// content is refused. The manifest's declared sizes are checked against
// the size cap before any layer is fetched; every layer and the
// configuration are checked against their digests as they are read, and
// the image appears in the store only when all of it checked out (a
// tampered layer leaves nothing behind). With o.Keys, the image's
// signature is verified before any layer is fetched, and the keys that
// verified it are recorded (Image.Signers). From an image index, the
// image for linux and this machine's architecture is taken; the recorded
// digest is the one the reference resolved to (the index's), which is
// the digest signatures and pins name.
//
// Errors wrap [ErrInvalid] for a malformed reference, [ErrNotFound] for a
// reference the registry does not have, [ErrVerify] for content or
// signatures that do not check out and for images over the cap; others
// are registry or I/O failures. Messages name the reference and the
// reason, never credentials.
func (s *Store) Pull(ctx context.Context, ref string, o PullOptions) (*Image, error) {
	canon, err := CanonicalReference(ref)
	if err != nil {
		return nil, err
	}
	repo, tag, err := s.storedRef(canon)
	if err != nil {
		return nil, err
	}
	// Resolve sends the resolved and verified events; the store
	// checks, once they passed, whether it already has the content.
	res, err := Resolve(ctx, canon, o)
	if err != nil {
		return nil, err
	}
	event := res.Emit(o)
	digest, signers, layers := res.Digest, res.Signers, res.planned

	// The store already has this content from this source (and, when
	// keys are given, verified by them): nothing to fetch.
	if old, err := s.load(repo, tag); err == nil && old.Digest == digest && old.Source == res.Source &&
		!slices.ContainsFunc(signers, func(f string) bool { return !slices.Contains(old.Signers, f) }) {
		event(PullEvent{Event: "stored", Digest: digest})
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
	rec := record{Name: canon, Format: formatRegistry, Source: res.Source, Signers: signers}
	if err := unpackRemote(ctx, res.img, layers, rootfs, &rec, func(i int, done int64) {
		event(PullEvent{Event: "layer", Digest: digest, Layer: layers[i].digest, Index: i + 1, Layers: len(layers), Done: done, Total: layers[i].size})
	}); err != nil {
		return nil, pullError(canon, err)
	}
	rec.Digest = digest
	rec.Imported = time.Now().UTC()
	out, err := s.finish(ctx, imageDir, &rec, repo, tag, "image pull "+canon)
	if err == nil {
		event(PullEvent{Event: "stored", Digest: digest})
	}
	return out, err
}

// remoteOptions are the registry client's options of a pull.
func (r *Registries) remoteOptions(ctx context.Context) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(r),
		remote.WithTransport(r.transport()),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}),
		remote.WithUserAgent("dsh-sandbox"),
	}
}

// plannedLayer is a layer as the manifest declares it.
type plannedLayer struct {
	layer  v1.Layer
	digest string
	size   int64
}

// plannedLayers lists img's layers with their declared sizes and returns
// the compressed total, configuration included.
func plannedLayers(img v1.Image) ([]plannedLayer, int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return nil, 0, err
	}
	ls, err := img.Layers()
	if err != nil {
		return nil, 0, err
	}
	if len(ls) != len(m.Layers) {
		return nil, 0, fmt.Errorf("the manifest lists %d layers, the image has %d", len(m.Layers), len(ls))
	}
	total := max(m.Config.Size, 0)
	out := make([]plannedLayer, len(ls))
	for i, l := range ls {
		d := m.Layers[i]
		if d.Size < 0 {
			return nil, 0, fmt.Errorf("layer %d declares a negative size", i+1)
		}
		out[i] = plannedLayer{layer: l, digest: d.Digest.String(), size: d.Size}
		total += d.Size
	}
	return out, total, nil
}

// unpackRemote reads img's configuration and extracts its layers in
// order into a new directory rootfs, filling rec's environment and
// creation time. progress gets each layer's bytes read so far.
func unpackRemote(ctx context.Context, img v1.Image, layers []plannedLayer, rootfs string, rec *record, progress func(i int, done int64)) error {
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
			return fmt.Errorf("layer %d (%s): %w", i+1, l.digest, err)
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
func pullLayer(ctx context.Context, x *extractor, l plannedLayer, progress func(int64)) error {
	rc, err := l.layer.Compressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	sum := sha256.New()
	counted := &progressReader{ctx: ctx, r: io.TeeReader(&capReader{r: rc, left: l.size}, sum), total: l.size, fn: func(done, _ int64) { progress(done) }}
	br := bufio.NewReaderSize(counted, 64<<10)
	err = extractCompressed(ctx, x, br)
	// Read what is left, so that the digest covers the whole stream.
	if _, derr := io.Copy(io.Discard, br); derr != nil && err == nil {
		err = derr
	}
	if got := "sha256:" + hex.EncodeToString(sum.Sum(nil)); counted.done == l.size && got != l.digest {
		return fmt.Errorf("%w: the registry sent content with digest %s (tampered or corrupt)", ErrVerify, got)
	}
	if err == nil && counted.done != l.size {
		err = fmt.Errorf("%w: the registry sent %d of the %d bytes the manifest declares", ErrVerify, counted.done, l.size)
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

// registryError classifies a failure of the registry client during step.
func registryError(ref, step string, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("%w: %s: the registry has no such image (%s)", ErrNotFound, ref, firstLine(err))
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("%s: %s: the registry refused access (HTTP %d); credentials come only from the operator's registry config: %s", step, ref, te.StatusCode, firstLine(err))
		}
	}
	if isDigestError(err) {
		return fmt.Errorf("%w: %s: %s: %s", ErrVerify, ref, step, firstLine(err))
	}
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return fmt.Errorf("%s %s: the registry speaks plain HTTP, and only registries the operator lists as insecure are reached over plain HTTP: %s", step, ref, firstLine(err))
	}
	return fmt.Errorf("%s %s: %s", step, ref, firstLine(err))
}

// pullError classifies a failure while fetching and unpacking layers:
// content that does not match its digest keeps its ErrVerify, an unsafe
// layer its ErrInvalid.
func pullError(ref string, err error) error {
	if errors.Is(err, ErrVerify) || errors.Is(err, ErrInvalid) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("image pull %s: %w", ref, err)
	}
	return registryError(ref, "fetch", err)
}

// isDigestError reports whether err is the registry client's complaint
// that content does not match its digest or size.
func isDigestError(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "digest mismatch") || strings.Contains(msg, "error verifying") ||
		strings.Contains(msg, "manifest digest") || strings.Contains(msg, "size mismatch") ||
		strings.Contains(msg, "does not match expected size")
}

// firstLine is err's message up to its first newline, bounded.
func firstLine(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
	return msg
}
