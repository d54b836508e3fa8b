package driver

import "github.com/dsh-sandbox/dsh-sandbox/sandbox"

// ImportedImage refuses, as an invalid argument naming policy.image, the
// generated host image (or none) on a backend that runs only images
// imported into its daemon.
func ImportedImage(backend, image string) error {
	if image == "" || image == "host" {
		return sandbox.Errorf(sandbox.ErrInvalid, "%s: policy.image %q: the host image exists only for the oci backend; import an image with `dsh-sandbox images import --backend %s`", backend, image, backend)
	}
	return nil
}
