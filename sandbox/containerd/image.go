package containerd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/core/images"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	dshimages "github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// ImportRootfs stores the uncompressed root-filesystem tarball r in the
// executor's namespace as a one-layer image whose environment is env,
// and unpacks it into the snapshotter. The image is called by the
// canonical form of name (images.CanonicalName: "bb2" is stored as
// "bb2:latest", "docker.io/myorg/tools:1" as "myorg/tools:1"), as every
// backend names it; policies may use any spelling. An image of that name
// is replaced.
func (e *Executor) ImportRootfs(ctx context.Context, r io.Reader, name string, env []string) error {
	canon, err := driver.CanonicalImage(Backend, "image name", name)
	if err != nil {
		return err
	}
	ctx = e.ctx(ctx)
	// The lease keeps the blobs from the garbage collector until the
	// image record points at them.
	ctx, done, err := e.cli.WithLease(ctx)
	if err != nil {
		return classify(err, "import %q: lease", canon)
	}
	defer func() { _ = done(context.WithoutCancel(ctx)) }()

	// The layer goes through a temporary file: its digest must be known
	// before the content store takes it.
	tmp, err := os.CreateTemp(e.opts.StateDir, "import-*.tar")
	if err != nil {
		return sandbox.Errorf(sandbox.ErrInternal, "containerd: import %q: %v", canon, err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	dg := digest.Canonical.Digester()
	size, err := io.Copy(io.MultiWriter(tmp, dg.Hash()), r)
	if err != nil {
		return sandbox.Errorf(sandbox.ErrInternal, "containerd: import %q: read rootfs tarball: %v", canon, err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return sandbox.Errorf(sandbox.ErrInternal, "containerd: import %q: %v", canon, err)
	}
	cs := e.cli.ContentStore()
	layer := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayer, Digest: dg.Digest(), Size: size}
	if err := content.WriteBlob(ctx, cs, "dsh-layer-"+layer.Digest.Encoded(), tmp, layer); err != nil {
		return classify(err, "import %q: write layer", canon)
	}
	mfDesc, err := writeManifest(ctx, cs, canon, layer, env)
	if err != nil {
		return err
	}
	rec := images.Image{Name: canon, Target: mfDesc, Labels: map[string]string{reap.LabelOwner: reap.LabelOwnerValue}}
	is := e.cli.ImageService()
	if _, err := is.Create(ctx, rec); err != nil {
		if !cerrdefs.IsAlreadyExists(err) {
			return classify(err, "import %q: create image", canon)
		}
		if _, err := is.Update(ctx, rec); err != nil {
			return classify(err, "import %q: update image", canon)
		}
	}
	img := containerd.NewImage(e.cli, rec)
	if err := img.Unpack(ctx, snapshotter); err != nil {
		return classify(err, "import %q: unpack", canon)
	}
	return nil
}

// writeManifest stores the config of the one-layer image canon whose
// layer is layer and whose environment is env, and its manifest, in cs.
// It returns the manifest's descriptor.
func writeManifest(ctx context.Context, cs content.Store, canon string, layer ocispec.Descriptor, env []string) (ocispec.Descriptor, error) {
	cfg := ocispec.Image{
		Created:  ptr(time.Now().UTC()),
		Platform: ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Config:   ocispec.ImageConfig{Env: env},
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{layer.Digest}},
	}
	// The config names its unpacked snapshot (a single layer's chain id
	// is its diff id) from the start: re-importing an image replaces the
	// record's config, and until Unpack labels the new one a concurrent
	// garbage collection would otherwise remove the snapshot that
	// existing images and new containers still need.
	cfgRefs := map[string]string{"containerd.io/gc.ref.snapshot." + snapshotter: layer.Digest.String()}
	cfgDesc, err := writeJSON(ctx, cs, ocispec.MediaTypeImageConfig, cfg, cfgRefs)
	if err != nil {
		return ocispec.Descriptor{}, classify(err, "import %q: write config", canon)
	}
	mf := ocispec.Manifest{
		MediaType: ocispec.MediaTypeImageManifest,
		Config:    cfgDesc,
		Layers:    []ocispec.Descriptor{layer},
	}
	mf.SchemaVersion = 2
	// The manifest's labels tell the garbage collector what it refers to.
	refs := map[string]string{
		"containerd.io/gc.ref.content.config": cfgDesc.Digest.String(),
		"containerd.io/gc.ref.content.l.0":    layer.Digest.String(),
	}
	mfDesc, err := writeJSON(ctx, cs, ocispec.MediaTypeImageManifest, mf, refs)
	if err != nil {
		return ocispec.Descriptor{}, classify(err, "import %q: write manifest", canon)
	}
	return mfDesc, nil
}

func ptr[T any](v T) *T { return &v }

// writeJSON stores v as a blob of mediaType with labels.
func writeJSON(ctx context.Context, cs content.Store, mediaType string, v any, labels map[string]string) (ocispec.Descriptor, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("encode %s: %w", mediaType, err)
	}
	desc := ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(data), Size: int64(len(data))}
	var opts []content.Opt
	if labels != nil {
		opts = append(opts, content.WithLabels(labels))
	}
	if err := content.WriteBlob(ctx, cs, "dsh-"+desc.Digest.Encoded(), bytes.NewReader(data), desc, opts...); err != nil {
		return ocispec.Descriptor{}, err
	}
	return desc, nil
}

// Images lists the images dsh-sandbox imported into the executor's
// namespace, newest first: name, manifest digest, the size of their
// content and when they were created.
func (e *Executor) Images(ctx context.Context) ([]dshimages.Image, error) {
	ctx = e.ctx(ctx)
	recs, err := e.cli.ImageService().List(ctx, labelFilter(reap.LabelOwner, reap.LabelOwnerValue))
	if err != nil {
		return nil, classify(err, "list images")
	}
	slices.SortStableFunc(recs, func(a, b images.Image) int { return b.CreatedAt.Compare(a.CreatedAt) })
	out := make([]dshimages.Image, 0, len(recs))
	for _, rec := range recs {
		size, err := containerd.NewImage(e.cli, rec).Size(ctx)
		if err != nil {
			return nil, classify(err, "image %q: size", rec.Name)
		}
		img := recordImage(rec)
		img.Size = size
		out = append(out, *img)
	}
	return out, nil
}

// qualifiedName is the fully qualified form ctr and the CRI use for a
// canonical name on Docker Hub ("bb2:latest" is
// "docker.io/library/bb2:latest"); "" for a name with a registry.
func qualifiedName(canon string) string {
	first, _, nested := strings.Cut(canon, "/")
	switch {
	case !nested:
		return "docker.io/library/" + canon
	case strings.ContainsAny(first, ".:") || first == "localhost" || strings.ToLower(first) != first:
		return ""
	default:
		return "docker.io/" + canon
	}
}

// policyImage finds the image a policy names, by any spelling of it: the
// canonical name dsh-sandbox imports under, else the fully qualified
// Docker Hub name other clients of the namespace use.
func (e *Executor) policyImage(ctx context.Context, name string) (containerd.Image, error) {
	canon, err := driver.CanonicalRef(Backend, "policy.image", name)
	if err != nil {
		return nil, err
	}
	img, err := e.cli.GetImage(ctx, canon)
	if q := qualifiedName(canon); cerrdefs.IsNotFound(err) && q != "" {
		if qimg, qerr := e.cli.GetImage(ctx, q); qerr == nil {
			return qimg, nil
		}
	}
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, sandbox.Errorf(sandbox.ErrNotFound, "containerd: policy.image %q: %q is not in namespace %q; import it with `dsh-sandbox images import --backend containerd`: %w", name, canon, e.opts.Namespace, err)
		}
		return nil, classify(err, "policy.image %q", name)
	}
	return img, nil
}

// RemoveImage removes the image called name (any spelling of it: "bb2"
// is "bb2:latest"; a pulled one also "NAME@sha256:…") that dsh-sandbox
// imported or pulled into the executor's
// namespace, with its content and snapshots once nothing else refers to
// them, and returns its canonical name. An image without the owner label
// is not dsh-sandbox's to remove (sandbox.ErrInvalid); a missing one is
// sandbox.ErrNotFound; one that a container of the namespace still uses
// (a running call, or one a crash left behind) is refused with
// sandbox.ErrUnavailable naming the container.
func (e *Executor) RemoveImage(ctx context.Context, name string) (string, error) {
	canon, err := driver.CanonicalRef(Backend, "image name", name)
	if err != nil {
		return "", err
	}
	ctx = e.ctx(ctx)
	is := e.cli.ImageService()
	rec, err := is.Get(ctx, canon)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return "", sandbox.Errorf(sandbox.ErrNotFound, "containerd: image %q is not in namespace %q: %w", canon, e.opts.Namespace, err)
		}
		return "", classify(err, "image %q", canon)
	}
	if rec.Labels[reap.LabelOwner] != reap.LabelOwnerValue {
		return "", sandbox.Errorf(sandbox.ErrInvalid, "containerd: image %q: not imported by dsh-sandbox (no label %s=%s); remove it with ctr images rm", canon, reap.LabelOwner, reap.LabelOwnerValue)
	}
	users, err := e.cli.ContainerService().List(ctx, "image=="+canon)
	if err != nil {
		return "", classify(err, "image %q: list its containers", canon)
	}
	if len(users) > 0 {
		return "", sandbox.Errorf(sandbox.ErrUnavailable, "containerd: image %q: in use by container %s; remove it when the call has ended", canon, users[0].ID)
	}
	if err := is.Delete(ctx, canon, images.SynchronousDelete()); err != nil {
		return "", classify(err, "remove image %q", canon)
	}
	return canon, nil
}
