package registry

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/dsh-sandbox/dsh-sandbox/images"
)

// Cosign's key-based signatures of an image of digest sha256:<hex> are
// the layers of the image tagged "sha256-<hex>.sig" in the same
// repository: each layer is a simple-signing payload (a small JSON
// document naming the signed digest), and its annotation
// SignatureAnnotation holds the base64 signature of the payload's bytes.
const (
	// SignatureAnnotation is the layer annotation holding a signature.
	SignatureAnnotation = "dev.cosignproject.cosign/signature"
	// SimpleSigningMediaType is the media type of payload layers.
	SimpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	// signatureType is the payload's critical.type.
	signatureType = "cosign container image signature"
	// maxPayload bounds one payload, maxSignatures the layers read.
	maxPayload    = 64 << 10
	maxSignatures = 64
)

// simpleSigning is the part of a payload that is checked.
type simpleSigning struct {
	Critical struct {
		Image struct {
			DockerManifestDigest string `json:"docker-manifest-digest"`
		} `json:"image"`
		Type string `json:"type"`
	} `json:"critical"`
}

// SignatureTag is the tag of the signatures of digest ("sha256:<hex>").
func SignatureTag(digest string) string {
	return strings.Replace(digest, ":", "-", 1) + ".sig"
}

// VerifySignature checks that repository (as the registry names it, e.g.
// "127.0.0.1:5000/tools") holds a cosign signature of digest made by one
// of keys, and returns the fingerprints of the keys that verified (at
// least one). A signature counts only when it verifies over its payload
// and the payload names digest as the signed image. Errors wrap
// images.ErrVerify and say why: no signatures, or none verified (with each
// signature's reason), or the registry could not be asked.
func VerifySignature(ctx context.Context, regs *images.Registries, repository, digest string, keys []images.PublicKey) ([]string, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: %s@%s: no keys to verify with", images.ErrVerify, repository, digest)
	}
	m, layers, err := fetchSignatures(ctx, regs, repository, digest)
	if err != nil {
		return nil, err
	}
	var reasons []string
	var signers []string
	for i, d := range m.Layers {
		if i == maxSignatures {
			reasons = append(reasons, fmt.Sprintf("more than %d signatures; the rest were not read", maxSignatures))
			break
		}
		by, reason := checkSignature(i, d, layers[i], digest, keys)
		if reason != "" {
			reasons = append(reasons, reason)
			continue
		}
		for _, f := range by {
			if !slices.Contains(signers, f) {
				signers = append(signers, f)
			}
		}
	}
	if len(signers) == 0 {
		if len(reasons) == 0 {
			reasons = append(reasons, "the signature image has no layers")
		}
		return nil, fmt.Errorf("%w: %s@%s: no valid signature by the policy's keys: %s", images.ErrVerify, repository, digest, strings.Join(reasons, "; "))
	}
	return signers, nil
}

// fetchSignatures fetches the manifest and layers of the signature image
// of repository@digest (tagged SignatureTag(digest)). Errors wrap
// images.ErrVerify (no signature image, or the registry could not be
// asked) or images.ErrInvalid (a reference that does not parse).
func fetchSignatures(ctx context.Context, regs *images.Registries, repository, digest string) (*v1.Manifest, []v1.Layer, error) {
	ref := repository + ":" + SignatureTag(digest)
	var opts []name.Option
	if first, _, ok := strings.Cut(repository, "/"); ok && regs.Insecure(first) {
		opts = append(opts, name.Insecure)
	}
	tagRef, err := name.NewTag(ref, opts...)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: signature reference %q: %v", images.ErrInvalid, ref, err)
	}
	img, err := remote.Image(tagRef, remoteOptions(ctx, regs)...)
	if err != nil {
		if errors.Is(registryError(ref, "fetch signatures", err), images.ErrNotFound) {
			return nil, nil, fmt.Errorf("%w: %s@%s is not signed: the registry has no signature image %s", images.ErrVerify, repository, digest, ref)
		}
		return nil, nil, fmt.Errorf("%w: %s@%s: signatures: %v", images.ErrVerify, repository, digest, registryError(ref, "fetch", err))
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %s@%s: signature manifest: %v", images.ErrVerify, repository, digest, err)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != len(m.Layers) {
		return nil, nil, fmt.Errorf("%w: %s@%s: signature image %s: unreadable layers", images.ErrVerify, repository, digest, ref)
	}
	return m, layers, nil
}

// checkSignature checks signature layer i (descriptor d, contents
// layer): it returns the fingerprints of the keys its signature verifies
// with when its payload is a simple-signing document naming digest, and
// otherwise the reason it does not count.
func checkSignature(i int, d v1.Descriptor, layer v1.Layer, digest string, keys []images.PublicKey) (by []string, reason string) {
	sig64, ok := d.Annotations[SignatureAnnotation]
	if !ok || string(d.MediaType) != SimpleSigningMediaType {
		return nil, fmt.Sprintf("layer %d is not a simple-signing signature", i+1)
	}
	sig, err := base64.StdEncoding.DecodeString(sig64)
	if err != nil {
		return nil, fmt.Sprintf("signature %d is not base64", i+1)
	}
	if d.Size > maxPayload {
		return nil, fmt.Sprintf("payload %d is %d bytes, more than %d", i+1, d.Size, maxPayload)
	}
	payload, err := readPayload(layer, d.Digest.String())
	if err != nil {
		return nil, fmt.Sprintf("payload %d: %v", i+1, err)
	}
	for _, k := range keys {
		if k.Verify(sig, payload) == nil {
			by = append(by, k.Fingerprint)
		}
	}
	if len(by) == 0 {
		return nil, fmt.Sprintf("signature %d does not verify with any of the %d keys", i+1, len(keys))
	}
	var p simpleSigning
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Sprintf("payload %d is not a simple-signing document", i+1)
	}
	if p.Critical.Type != signatureType {
		return nil, fmt.Sprintf("payload %d has type %q, want %q", i+1, p.Critical.Type, signatureType)
	}
	if p.Critical.Image.DockerManifestDigest != digest {
		return nil, fmt.Sprintf("signature %d signs %q, not %s", i+1, p.Critical.Image.DockerManifestDigest, digest)
	}
	return by, ""
}

// readPayload reads one payload layer, checked against its digest.
func readPayload(l interface {
	Compressed() (io.ReadCloser, error)
}, digest string) ([]byte, error) {
	rc, err := l.Compressed()
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxPayload+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxPayload {
		return nil, fmt.Errorf("more than %d bytes", maxPayload)
	}
	if sum := sha256.Sum256(data); "sha256:"+hex.EncodeToString(sum[:]) != digest {
		return nil, fmt.Errorf("content does not match its digest %s", digest)
	}
	return data, nil
}
