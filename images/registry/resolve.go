package registry

import (
	"context"
	"fmt"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/dsh-sandbox/dsh-sandbox/images"
)

// Resolved is a reference checked against its registry before anything
// of it is fetched: its digest, its signature (when keys were asked
// for) and its declared size. Backends whose daemon fetches the layers
// (docker, containerd) pull by Digest what Resolve checked, so that the
// daemon gets exactly the checked image.
type Resolved struct {
	// Reference is the canonical reference resolved; Repository its
	// repository ("127.0.0.1:5000/tools"), Registry its registry host
	// ("127.0.0.1:5000", "index.docker.io").
	Reference  string
	Repository string
	Registry   string
	// Source is the registry's full name of the reference
	// ("index.docker.io/library/golang:1.26"), recorded as Image.Source.
	Source string
	// Digest is the manifest (or index) digest the reference resolved
	// to; Pinned is Repository@Digest.
	Digest string
	Pinned string
	// Signers are the fingerprints of the keys that verified the
	// signature; nil when no keys were asked for.
	Signers []string
	// Size is the declared compressed size of the platform image
	// (layers plus configuration); Layers its layers' digests, in order,
	// with LayerSizes their declared sizes.
	Size       int64
	Layers     []string
	LayerSizes []int64

	img     v1.Image
	planned []images.Layer
}

// Resolve checks ref (any spelling images.CanonicalReference takes)
// against its registry as [Pull] does before it fetches a layer: a digest
// reference must resolve to that digest, a signature by one of o.Keys
// must verify (when o.Keys is not empty), and the declared size must be
// within o.MaxBytes. It sends o.Progress the "resolved" and "verified"
// events. Errors are classified as Pull's.
func Resolve(ctx context.Context, ref string, o images.PullOptions) (*Resolved, error) {
	canon, err := images.CanonicalReference(ref)
	if err != nil {
		return nil, err
	}
	_, pinned, byDigest := strings.Cut(canon, "@")
	event := emit(o, canon, "")
	maxBytes := o.MaxBytes
	if maxBytes <= 0 {
		maxBytes = images.DefaultMaxPullBytes
	}
	nr, err := reference(o.Registries, canon)
	if err != nil {
		return nil, err
	}
	desc, err := remote.Get(nr, remoteOptions(ctx, o.Registries)...)
	if err != nil {
		return nil, registryError(canon, "resolve", err)
	}
	digest := desc.Digest.String()
	if byDigest && digest != pinned {
		return nil, fmt.Errorf("%w: %s: the registry's manifest has digest %s", images.ErrVerify, canon, digest)
	}
	event(images.PullEvent{Event: "resolved", Digest: digest})
	repository := nr.Context().Name()
	r := &Resolved{Reference: canon, Repository: repository, Registry: nr.Context().RegistryStr(), Source: nr.Name(), Digest: digest, Pinned: repository + "@" + digest}
	if len(o.Keys) > 0 {
		if r.Signers, err = VerifySignature(ctx, o.Registries, repository, digest, o.Keys); err != nil {
			return nil, err
		}
		for _, sg := range r.Signers {
			event(images.PullEvent{Event: "verified", Digest: digest, Signer: sg})
		}
	}
	if r.img, err = desc.Image(); err != nil {
		return nil, registryError(canon, "read manifest", err)
	}
	// A pinned index resolves to its platform image; the image is then
	// fetched by its own digest, which the registry client checks.
	if r.planned, r.Size, err = plannedLayers(r.img); err != nil {
		return nil, registryError(canon, "read manifest", err)
	}
	if r.Size > maxBytes {
		return nil, fmt.Errorf("%w: %s: the image is %d bytes compressed, more than the cap of %d", images.ErrVerify, canon, r.Size, maxBytes)
	}
	for i, l := range r.planned {
		if l.Size > maxBytes {
			return nil, fmt.Errorf("%w: %s: layer %d (%s) is %d bytes, more than the cap of %d", images.ErrVerify, canon, i+1, l.Digest, l.Size, maxBytes)
		}
		r.Layers = append(r.Layers, l.Digest)
		r.LayerSizes = append(r.LayerSizes, l.Size)
	}
	return r, nil
}

// emit returns the function that sends o.Progress the events of a pull
// of ref: each with ref as its Reference, and digest as its Digest when
// it names none.
func emit(o images.PullOptions, ref, digest string) func(images.PullEvent) {
	return func(e images.PullEvent) {
		if o.Progress != nil {
			e.Reference = ref
			if e.Digest == "" {
				e.Digest = digest
			}
			o.Progress(e)
		}
	}
}

// Emit returns the function that sends o.Progress the events of the
// pull of r (Reference and Digest filled in), for the backends that pull
// what Resolve checked.
func (r *Resolved) Emit(o images.PullOptions) func(images.PullEvent) {
	return emit(o, r.Reference, r.Digest)
}
