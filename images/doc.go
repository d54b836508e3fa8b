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
// Images pulled from registries enter the store through
// [Store.AddRemote], every layer checked against its digest as it is
// read; the registry client that resolves and verifies them is the
// subpackage images/registry, which takes the operator's credentials and
// plain-HTTP registries ([Registries]), the pull's options
// ([PullOptions]) and the keys signatures are verified with
// ([PublicKey]) from here.
//
// The package imports only the standard library,
// github.com/google/go-containerregistry's image types (never its
// registry client, remote and authn, which link Docker's credential
// configuration), klauspost/compress (zstd layers) and sigstore's
// signature packages. It may be imported by the
// sandbox backends, by policy and by cmd/dsh-sandbox; it never imports
// another package of this module.
package images
