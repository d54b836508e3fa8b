// Package images provides the root filesystems that sandbox backends run
// calls in: the generated "host" image (read-only binds of the host's
// /usr, /bin, /lib* and /sbin plus a generated /etc, see [Host]) and a
// local [Store] of images imported from tarballs (a plain root-filesystem
// tarball, a docker-archive as written by `docker save`, or an OCI image
// layout tarball).
//
// Archives are unpacked by a defensive extractor that refuses path
// traversal, links that point out of the root filesystem, writes through
// symbolic links, device nodes and FIFOs, and strips setuid and setgid
// bits (see [Store.Import]).
//
// [Store.Pull] fetches images from registries into the store: by tag or
// by digest, with the operator's credentials and plain-HTTP registries
// ([Registries]), a size cap, every blob checked against its digest, and
// optionally cosign-compatible key-based signatures verified before any
// layer is fetched ([VerifySignature]).
//
// The package imports only the standard library,
// github.com/google/go-containerregistry, klauspost/compress (zstd
// layers) and sigstore's signature packages. It may be imported by the
// sandbox backends, by policy and by cmd/dsh-sandbox; it never imports
// another package of this module.
package images
