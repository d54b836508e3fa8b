// Package registry pulls images from registries into the local image
// store (images.Store): [Resolve] checks a reference against its
// registry before anything of it is fetched (its digest, optionally a
// cosign-compatible key-based signature, see [VerifySignature], and its
// declared size), and [Pull] fetches what Resolve checked into the store.
// The operator's registries (credentials, plain-HTTP registries) and
// the pull's options are images.Registries and images.PullOptions.
//
// It is the part of the image code that links the registry client
// (go-containerregistry's remote and authn, and through authn Docker's
// credential configuration), so that images itself, which the local
// backend imports, links none of it. It imports images; the backends
// whose daemon pulls (docker, containerd) and cmd/dsh-sandbox import it.
package registry
