package images

import (
	"context"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
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
	planned []plannedLayer
}

// Resolve checks ref (any spelling [CanonicalReference] takes) against
// its registry as [Store.Pull] does before it fetches a layer: a digest
// reference must resolve to that digest, a signature by one of o.Keys
// must verify (when o.Keys is not empty), and the declared size must be
// within o.MaxBytes. It sends o.Progress the "resolved" and "verified"
// events. Errors are classified as Pull's.
func Resolve(ctx context.Context, ref string, o PullOptions) (*Resolved, error) {
	canon, err := CanonicalReference(ref)
	if err != nil {
		return nil, err
	}
	_, tag, err := splitName(canon, true)
	if err != nil {
		return nil, err
	}
	event := o.emit(canon, "")
	maxBytes := o.MaxBytes
	if maxBytes <= 0 {
		maxBytes = DefaultMaxPullBytes
	}
	nr, err := o.Registries.reference(canon)
	if err != nil {
		return nil, err
	}
	desc, err := remote.Get(nr, o.Registries.remoteOptions(ctx)...)
	if err != nil {
		return nil, registryError(canon, "resolve", err)
	}
	digest := desc.Digest.String()
	if isDigestTag(tag) && digest != tag[1:] {
		return nil, fmt.Errorf("%w: %s: the registry's manifest has digest %s", ErrVerify, canon, digest)
	}
	event(PullEvent{Event: "resolved", Digest: digest})
	repository := nr.Context().Name()
	r := &Resolved{Reference: canon, Repository: repository, Registry: nr.Context().RegistryStr(), Source: nr.Name(), Digest: digest, Pinned: repository + "@" + digest}
	if len(o.Keys) > 0 {
		if r.Signers, err = VerifySignature(ctx, o.Registries, repository, digest, o.Keys); err != nil {
			return nil, err
		}
		for _, sg := range r.Signers {
			event(PullEvent{Event: "verified", Digest: digest, Signer: sg})
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
		return nil, fmt.Errorf("%w: %s: the image is %d bytes compressed, more than the cap of %d", ErrVerify, canon, r.Size, maxBytes)
	}
	for i, l := range r.planned {
		if l.size > maxBytes {
			return nil, fmt.Errorf("%w: %s: layer %d (%s) is %d bytes, more than the cap of %d", ErrVerify, canon, i+1, l.digest, l.size, maxBytes)
		}
		r.Layers = append(r.Layers, l.digest)
		r.LayerSizes = append(r.LayerSizes, l.size)
	}
	return r, nil
}

// emit returns the function that sends o.Progress the events of a pull
// of ref: each with ref as its Reference, and digest as its Digest when
// it names none.
func (o PullOptions) emit(ref, digest string) func(PullEvent) {
	return func(e PullEvent) {
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
func (r *Resolved) Emit(o PullOptions) func(PullEvent) { return o.emit(r.Reference, r.Digest) }

// Credentials returns the operator's credentials for registry (host[:port]
// as in Resolved.Registry), for a daemon that pulls itself; false when
// the operator gave none (an anonymous pull).
func (r *Registries) Credentials(registry string) (authn.AuthConfig, bool) {
	if r == nil {
		return authn.AuthConfig{}, false
	}
	ac, ok := r.auths[authHost(registry)]
	return ac, ok
}
