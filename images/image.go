package images

import (
	"errors"
	"time"
)

// Error classes. Every error returned by this package for a missing image
// wraps ErrNotFound, and every error caused by a malformed or unsafe
// argument or archive wraps ErrInvalid, so that callers can classify them
// with errors.Is. Other errors (I/O failures) wrap neither.
//
// ErrVerify is the class of an image that failed a check of its content
// or origin: a digest that does not match, a tampered layer, a missing
// or invalid signature, a pull over the size cap. Nothing of such an
// image is stored.
var (
	ErrNotFound = errors.New("image not found")
	ErrInvalid  = errors.New("invalid image")
	ErrVerify   = errors.New("image verification failed")
)

// HostName is the name of the generated host image returned by [Host]. It
// is reserved: no stored image may use it.
const HostName = "host"

// DefaultPath is the PATH given to images whose configuration names none
// (the host image and plain root-filesystem tarballs).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Image describes a root filesystem a backend can run a call in. An Image
// is a plain value: it is safe to copy and to read from several
// goroutines; nothing in it is refreshed after it was returned.
type Image struct {
	// Name is the canonical name: "host" for the host image, else
	// "repository:tag" (the tag defaults to "latest").
	Name string `json:"name"`
	// Rootfs is the absolute path of the unpacked root filesystem. It is
	// empty for the host image: the backend builds a per-call skeleton
	// holding the Binds' mount points and the Symlinks.
	Rootfs string `json:"rootfs,omitempty"`
	// Env is the image's own environment as KEY=VALUE (layer 1 of
	// DESIGN §3.6). It always holds a PATH.
	Env []string `json:"env"`
	// Binds are host paths to bind-mount read-only, in order (a later
	// target may lie below an earlier one). Nil for stored images.
	Binds []Bind `json:"binds,omitempty"`
	// Symlinks maps absolute paths inside the container to the link
	// text the backend creates in its per-call skeleton (for example
	// "/bin" → "usr/bin" on hosts with a merged /usr). Nil for stored
	// images.
	Symlinks map[string]string `json:"symlinks,omitempty"`
	// Host is true for the host image.
	Host bool `json:"host,omitempty"`
	// Digest identifies the imported content: the manifest digest for
	// docker-archive and OCI layout imports, the sha256 of the input
	// file for plain root-filesystem tarballs; empty for the host image.
	Digest string `json:"digest,omitempty"`
	// Size is the number of bytes of regular files in Rootfs; 0 for the
	// host image.
	Size int64 `json:"size,omitempty"`
	// Created is the creation time recorded in the image configuration;
	// zero when unknown.
	Created time.Time `json:"created,omitzero"`
	// Imported is when the image was imported or pulled; zero for the
	// host image.
	Imported time.Time `json:"imported,omitzero"`
	// Source is the registry reference a pulled image came from
	// ("127.0.0.1:5000/tools:1", "index.docker.io/library/golang:1.26");
	// empty for imported images.
	Source string `json:"source,omitempty"`
	// Signers are the fingerprints ("sha256:<hex>" of the DER public
	// key, see [KeyFingerprint]) of the keys whose signature of Digest
	// was verified when the image was pulled; nil when none was asked
	// for.
	Signers []string `json:"signers,omitempty"`
}

// Bind is one read-only bind mount of a host path.
type Bind struct {
	// Source is the absolute host path (a directory or a file).
	Source string `json:"source"`
	// Target is the absolute path inside the container.
	Target string `json:"target"`
}
