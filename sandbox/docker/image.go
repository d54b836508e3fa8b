package docker

import (
	"context"
	"io"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// ImportRootfs imports a plain root-filesystem tarball (such as
// images.BusyboxRootfsTar writes) into the engine as image name, with env
// as its environment (KEY=VALUE; nil means PATH=images.DefaultPath). name
// is checked with images.ValidateName. It replaces an image of that name
// and removes the replaced one unless a container still uses it.
func (e *Executor) ImportRootfs(ctx context.Context, tar io.Reader, name string, env []string) error {
	if err := images.ValidateName(name); err != nil {
		return sandbox.Errorf(sandbox.ErrInvalid, "docker: image name %q: %w", name, err)
	}
	if env == nil {
		env = []string{"PATH=" + images.DefaultPath}
	}
	changes := make([]string, 0, len(env))
	for _, kv := range env {
		if strings.ContainsAny(kv, "\n\x00") || !strings.Contains(kv, "=") {
			return sandbox.Errorf(sandbox.ErrInvalid, "docker: image env entry %q is not KEY=VALUE on one line", kv)
		}
		changes = append(changes, "ENV "+kv)
	}
	var old string
	if img, err := e.cli.ImageInspect(ctx, name); err == nil {
		old = img.ID
	}
	rc, err := e.cli.ImageImport(ctx, image.ImportSource{Source: tar, SourceName: "-"}, name, image.ImportOptions{Changes: changes})
	if err != nil {
		return unavailable(err, "import image %q", name)
	}
	defer rc.Close()
	// The engine reports progress and errors as a JSON stream; an error
	// in it surfaces when the image is missing afterwards.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return unavailable(err, "import image %q", name)
	}
	img, err := e.cli.ImageInspect(ctx, name)
	if err != nil {
		return unavailable(err, "import image %q: not present after the import", name)
	}
	if old != "" && old != img.ID {
		// The replaced image lost its name and would stay behind as a
		// dangling image; while a container uses it the engine refuses
		// (a conflict) and it stays.
		if _, err := e.cli.ImageRemove(ctx, old, image.RemoveOptions{}); err != nil && !cerrdefs.IsConflict(err) && !isNotFound(err) {
			e.log.Warn().Err(err).Str("image", old).Msg("could not remove the image an import replaced")
		}
	}
	return nil
}
