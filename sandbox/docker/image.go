package docker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// ImportRootfs imports a plain root-filesystem tarball (such as
// images.BusyboxRootfsTar writes) into the engine as image name, with env
// as its environment (KEY=VALUE; nil means PATH=images.DefaultPath) and
// the label reap.LabelOwner=reap.LabelOwnerValue, by which Doctor
// and Reap know the images dsh-sandbox imported. name is checked with
// images.CanonicalName and the image is named in that canonical form
// ("bb2" becomes "bb2:latest"), as every backend names it. It replaces an
// image of that name and removes the replaced one unless a container
// still uses it; Reap removes that one once it is unused. Imports
// through one Executor run one at a time.
func (e *Executor) ImportRootfs(ctx context.Context, tar io.Reader, name string, env []string) error {
	name, err := driver.CanonicalImage(Backend, "image name", name)
	if err != nil {
		return err
	}
	if env == nil {
		env = []string{"PATH=" + images.DefaultPath}
	}
	changes := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if strings.ContainsAny(kv, "\n\r\x00") || !strings.Contains(kv, "=") {
			return sandbox.Errorf(sandbox.ErrInvalid, "docker: image env entry %q is not KEY=VALUE on one line", kv)
		}
		changes = append(changes, "ENV "+kv)
	}
	changes = append(changes, "LABEL "+reap.LabelOwner+"="+reap.LabelOwnerValue)

	e.importMu.Lock()
	defer e.importMu.Unlock()
	// The image is imported without a name and named only once it is
	// complete, so that the name moves from the old image to the new one
	// in a single step.
	rc, err := e.cli.ImageImport(ctx, image.ImportSource{Source: tar, SourceName: "-"}, "", image.ImportOptions{Changes: changes})
	if err != nil {
		return unavailable(err, "import image %q", name)
	}
	defer rc.Close()
	id, err := importedID(rc)
	if err == nil && id == "" {
		err = errors.New("the engine reported no image id")
	}
	if err != nil {
		return unavailable(err, "import image %q", name)
	}
	var old string
	if img, err := e.cli.ImageInspect(ctx, name); err == nil {
		old = img.ID
	}
	if err := e.cli.ImageTag(ctx, id, name); err != nil {
		e.removeImage(context.WithoutCancel(ctx), id)
		return unavailable(err, "import image %q: name image %s", name, shortID(id))
	}
	// The image that lost the name would stay behind without one: the
	// replaced image, or ours when an import elsewhere named its image
	// right after ours.
	if old != "" && old != id {
		e.removeImage(ctx, old)
	}
	if img, err := e.cli.ImageInspect(ctx, name); err == nil && img.ID != id {
		e.removeImage(ctx, id)
	}
	return nil
}

// removeImage removes the image id unless a container uses it (the
// engine refuses with a conflict, and Reap removes it later); another
// failure is logged.
func (e *Executor) removeImage(ctx context.Context, id string) {
	_, err := e.cli.ImageRemove(ctx, id, image.RemoveOptions{})
	if err != nil && !cerrdefs.IsConflict(err) && !isNotFound(err) {
		e.opts.Logger.Warn("could not remove an image without a name; `dsh-sandbox reap --backend docker` removes it", "error", err, "image", id)
	}
}

// importedID reads the engine's progress stream of an import to its end
// and returns the new image's id (the last status that is one); an error
// message in the stream is an error.
func importedID(r io.Reader) (string, error) {
	var id string
	dec := json.NewDecoder(r)
	for {
		var m jsonmessage.JSONMessage
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return id, nil
		} else if err != nil {
			return "", fmt.Errorf("progress stream: %w", err)
		}
		if m.Error != nil {
			return "", m.Error
		}
		if strings.HasPrefix(m.Status, "sha256:") {
			id = strings.TrimSpace(m.Status)
		}
	}
}

// ownedImages lists the engine's images labelled as imported by
// dsh-sandbox, newest first; dangling selects those without a name.
func ownedImages(ctx context.Context, cli *client.Client, dangling bool) ([]image.Summary, error) {
	args := filters.NewArgs(filters.Arg("label", reap.LabelOwner+"="+reap.LabelOwnerValue))
	if dangling {
		args.Add("dangling", "true")
	}
	imgs, err := cli.ImageList(ctx, image.ListOptions{Filters: args})
	if err != nil {
		return nil, unavailable(err, "list images")
	}
	slices.SortStableFunc(imgs, func(a, b image.Summary) int { return cmp.Compare(b.Created, a.Created) })
	return imgs, nil
}

// danglingGrace is how old an image without a name must be before Reap
// removes it: ImportRootfs names its image a moment after the engine
// made it.
const danglingGrace = time.Minute

// Images lists the named images dsh-sandbox imported into the engine,
// newest first: one entry per name, with the engine's image id as the
// digest, its size and its creation time.
func (e *Executor) Images(ctx context.Context) ([]images.Image, error) {
	imgs, err := ownedImages(ctx, e.cli, false)
	if err != nil {
		return nil, err
	}
	var out []images.Image
	for _, img := range imgs {
		for _, tag := range img.RepoTags {
			if tag == "<none>:<none>" {
				continue
			}
			out = append(out, images.Image{Name: tag, Digest: img.ID, Size: img.Size, Imported: time.Unix(img.Created, 0).UTC()})
		}
	}
	return append(out, e.pulledImages(ctx)...), nil
}

// RemoveImage removes the image called name (any spelling of it:
// "bb2" is "bb2:latest"; a pulled one also by "NAME@sha256:…") that
// dsh-sandbox imported or pulled into the engine, and returns its
// canonical name. An image without the owner label is not
// dsh-sandbox's to remove (sandbox.ErrInvalid); a missing one is
// sandbox.ErrNotFound; one that a container still uses (a running call,
// or the container of a call an engine crash left behind) is refused
// with sandbox.ErrUnavailable naming the container. When the image has
// other names too, only this name goes.
func (e *Executor) RemoveImage(ctx context.Context, name string) (string, error) {
	canon, err := driver.CanonicalRef(Backend, "image name", name)
	if err != nil {
		return "", err
	}
	if pulled, err := e.removePulled(ctx, canon); pulled || err != nil {
		return canon, err
	}
	if canon, err = driver.CanonicalImage(Backend, "image name", name); err != nil {
		return "", err
	}
	img, err := e.cli.ImageInspect(ctx, canon)
	if err != nil {
		return "", unavailable(err, "image %q", canon)
	}
	if img.Config == nil || img.Config.Labels[reap.LabelOwner] != reap.LabelOwnerValue {
		return "", sandbox.Errorf(sandbox.ErrInvalid, "docker: image %q: not imported or pulled by dsh-sandbox (no label %s=%s, no pull record); remove it with docker rmi", canon, reap.LabelOwner, reap.LabelOwnerValue)
	}
	if err := e.refuseInUse(ctx, canon, img.ID); err != nil {
		return "", err
	}
	if _, err := e.cli.ImageRemove(ctx, canon, image.RemoveOptions{PruneChildren: true}); err != nil {
		if cerrdefs.IsConflict(err) {
			return "", sandbox.Errorf(sandbox.ErrUnavailable, "docker: image %q: in use: %w", canon, err)
		}
		return "", unavailable(err, "remove image %q", canon)
	}
	return canon, nil
}

// refuseInUse is an ErrUnavailable error naming the container that uses
// the image id (canon), nil when none does.
func (e *Executor) refuseInUse(ctx context.Context, canon, id string) error {
	users, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("ancestor", id))})
	if err != nil {
		return unavailable(err, "image %q: list its containers", canon)
	}
	for _, c := range users {
		if c.ImageID == id {
			return sandbox.Errorf(sandbox.ErrUnavailable, "docker: image %q: in use by container %s (%s); remove it when the call has ended", canon, strings.TrimPrefix(firstName(c.Names), "/"), c.State)
		}
	}
	return nil
}

// firstName returns the first of a container's names, "" when it has
// none.
func firstName(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}
