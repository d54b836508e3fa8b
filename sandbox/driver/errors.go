package driver

import (
	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// ImportedImage refuses, as an invalid argument naming policy.image, the
// generated host image (or none) on a backend that runs only images
// imported into its daemon.
func ImportedImage(backend, image string) error {
	if image == "" || image == "host" {
		return sandbox.Errorf(sandbox.ErrInvalid, "%s: policy.image %q: the host image exists only for the oci backend; import an image with `dsh-sandbox images import --backend %s`", backend, image, backend)
	}
	return nil
}

// CanonicalImage returns the image name of field in its canonical form
// (images.CanonicalName) on a backend that runs only images imported
// into its daemon: an invalid name, or the host image's, is an error
// wrapping sandbox.ErrInvalid that names backend and field.
func CanonicalImage(backend, field, name string) (string, error) {
	canon, err := images.CanonicalName(name)
	if err != nil {
		return "", sandbox.Errorf(sandbox.ErrInvalid, "%s: %s: %w", backend, field, err)
	}
	if canon == images.HostName {
		return "", sandbox.Errorf(sandbox.ErrInvalid, "%s: %s %q: the host image exists only for the oci backend", backend, field, name)
	}
	return canon, nil
}

// CanonicalRef is CanonicalImage for a name that may end in a digest
// (images.CanonicalReference): policy images and pulled images.
func CanonicalRef(backend, field, name string) (string, error) {
	canon, err := images.CanonicalReference(name)
	if err != nil {
		return "", sandbox.Errorf(sandbox.ErrInvalid, "%s: %s: %w", backend, field, err)
	}
	return canon, nil
}
