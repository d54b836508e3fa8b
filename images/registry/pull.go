package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"github.com/dsh-sandbox/dsh-sandbox/images"
)

// Pull fetches ref ("repository:tag" or "repository@sha256:…", in any
// spelling images.CanonicalReference takes) from its registry into st,
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
// Errors wrap images.ErrInvalid for a malformed reference,
// images.ErrNotFound for a reference the registry does not have,
// images.ErrVerify for content or signatures that do not check out and
// for images over the cap; others are registry or I/O failures. Messages
// name the reference and the reason, never credentials.
func Pull(ctx context.Context, st *images.Store, ref string, o images.PullOptions) (*images.Image, error) {
	canon, err := images.CanonicalReference(ref)
	if err != nil {
		return nil, err
	}
	if err := images.ValidateReference(canon); err != nil {
		return nil, err
	}
	// Resolve sends the resolved and verified events; the store
	// checks, once they passed, whether it already has the content.
	res, err := Resolve(ctx, canon, o)
	if err != nil {
		return nil, err
	}
	event := res.Emit(o)
	layers := res.planned
	out, err := st.AddRemote(ctx, images.Remote{
		Name: canon, Source: res.Source, Digest: res.Digest, Signers: res.Signers,
		Image: res.img, Layers: layers,
		Failed: func(err error) error { return pullError(canon, err) },
	}, func(i int, done int64) {
		event(images.PullEvent{Event: "layer", Digest: res.Digest, Layer: layers[i].Digest, Index: i + 1, Layers: len(layers), Done: done, Total: layers[i].Size})
	})
	if err == nil {
		event(images.PullEvent{Event: "stored", Digest: res.Digest})
	}
	return out, err
}

// plannedLayers lists img's layers with their declared sizes and returns
// the compressed total, configuration included.
func plannedLayers(img v1.Image) ([]images.Layer, int64, error) {
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
	out := make([]images.Layer, len(ls))
	for i, l := range ls {
		d := m.Layers[i]
		if d.Size < 0 {
			return nil, 0, fmt.Errorf("layer %d declares a negative size", i+1)
		}
		out[i] = images.Layer{Blob: l, Digest: d.Digest.String(), Size: d.Size}
		total += d.Size
	}
	return out, total, nil
}

// registryError classifies a failure of the registry client during step.
func registryError(ref, step string, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusNotFound:
			return fmt.Errorf("%w: %s: the registry has no such image (%s)", images.ErrNotFound, ref, firstLine(err))
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("%s: %s: the registry refused access (HTTP %d); credentials come only from the operator's registry config: %s", step, ref, te.StatusCode, firstLine(err))
		}
	}
	if isDigestError(err) {
		return fmt.Errorf("%w: %s: %s: %s", images.ErrVerify, ref, step, firstLine(err))
	}
	if strings.Contains(err.Error(), "server gave HTTP response to HTTPS client") {
		return fmt.Errorf("%s %s: the registry speaks plain HTTP, and only registries the operator lists as insecure are reached over plain HTTP: %s", step, ref, firstLine(err))
	}
	return fmt.Errorf("%s %s: %s", step, ref, firstLine(err))
}

// pullError classifies a failure while fetching and unpacking layers:
// content that does not match its digest keeps its images.ErrVerify, an unsafe
// layer its images.ErrInvalid.
func pullError(ref string, err error) error {
	if errors.Is(err, images.ErrVerify) || errors.Is(err, images.ErrInvalid) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
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
