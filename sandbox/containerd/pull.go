package containerd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	cerrdefs "github.com/containerd/errdefs"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	dshimages "github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/images/registry"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// Labels of the image records of pulled images, besides the owner
// label: the registry reference the image came from and the keys whose
// signature verified it.
const (
	labelSource  = "dsh-sandbox.source"
	labelSigners = "dsh-sandbox.signers"
)

// PulledImage returns the image ref names in the executor's namespace
// that dsh-sandbox pulled (Source set) or imported; an image that is not
// there, or not dsh-sandbox's, is an error wrapping images.ErrNotFound.
func (e *Executor) PulledImage(ctx context.Context, ref string) (*dshimages.Image, error) {
	canon, err := dshimages.CanonicalReference(ref)
	if err != nil {
		return nil, err
	}
	rec, err := e.cli.ImageService().Get(e.ctx(ctx), canon)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil, fmt.Errorf("%w: %s is not in namespace %q", dshimages.ErrNotFound, canon, e.opts.Namespace)
		}
		return nil, classify(err, "image %q", canon)
	}
	if rec.Labels[reap.LabelOwner] != reap.LabelOwnerValue {
		return nil, fmt.Errorf("%w: %s in namespace %q is not dsh-sandbox's", dshimages.ErrNotFound, canon, e.opts.Namespace)
	}
	return recordImage(rec), nil
}

// recordImage describes an image record of ours.
func recordImage(rec images.Image) *dshimages.Image {
	img := &dshimages.Image{Name: rec.Name, Digest: rec.Target.Digest.String(), Source: rec.Labels[labelSource], Imported: rec.CreatedAt.UTC()}
	if s := rec.Labels[labelSigners]; s != "" {
		img.Signers = strings.Split(s, ",")
	}
	return img
}

// PullImage pulls ref into the executor's namespace and unpacks it into
// the snapshotter calls use. The reference is first checked with
// registry.Resolve (its digest, its signature under o.Keys, its declared
// size against o.MaxBytes); then containerd fetches exactly that digest
// (it checks every blob against its digest as it writes it) through a
// resolver that has the operator's credentials (o.Registries) and
// speaks plain HTTP only to the registries o.Registries lists. The image
// is recorded as the canonical reference and, for a tag, also under the
// tag, labelled as dsh-sandbox's with its source and signers. Progress
// becomes "layer" events of o.Progress.
func (e *Executor) PullImage(ctx context.Context, ref string, o dshimages.PullOptions) (*dshimages.Image, error) {
	res, err := registry.Resolve(ctx, ref, o)
	if err != nil {
		return nil, err
	}
	event := res.Emit(o)
	maxBytes := o.MaxBytes
	if maxBytes <= 0 {
		maxBytes = dshimages.DefaultMaxPullBytes
	}
	ctx = e.ctx(ctx)
	ctx, done, err := e.cli.WithLease(ctx)
	if err != nil {
		return nil, classify(err, "pull %q: lease", res.Reference)
	}
	defer func() { _ = done(context.WithoutCancel(ctx)) }()

	resolver := registryResolver(o.Registries)
	fq := fullyQualified(res.Pinned)
	stop := e.watchProgress(ctx, res, event)
	img, err := e.cli.Pull(ctx, fq,
		containerd.WithResolver(resolver),
		containerd.WithPullUnpack,
		containerd.WithPullSnapshotter(snapshotter),
		containerd.WithImageHandler(capPull(res, maxBytes)),
	)
	stop()
	if err != nil {
		return nil, pullFailure(res, err)
	}
	if got := img.Target().Digest.String(); got != res.Digest {
		_ = e.cli.ImageService().Delete(ctx, fq)
		return nil, fmt.Errorf("%w: %s: containerd pulled %s, not the resolved %s", dshimages.ErrVerify, res.Reference, got, res.Digest)
	}
	for i, l := range res.Layers {
		event(dshimages.PullEvent{Event: "layer", Layer: l, Index: i + 1, Layers: len(res.Layers), Done: res.LayerSizes[i], Total: res.LayerSizes[i]})
	}
	out, err := e.recordPull(ctx, res, img.Target(), fq)
	if err != nil {
		return nil, err
	}
	event(dshimages.PullEvent{Event: "stored"})
	pulled := recordImage(out)
	pulled.Name = res.Reference
	if size, err := containerd.NewImage(e.cli, out).Size(ctx); err == nil {
		pulled.Size = size
	}
	return pulled, nil
}

// registryResolver is the resolver of a pull with the operator's
// registries regs: their credentials, and plain HTTP only to those regs
// lists as insecure.
func registryResolver(regs *dshimages.Registries) remotes.Resolver {
	hosts := docker.ConfigureDefaultRegistries(
		docker.WithPlainHTTP(func(host string) (bool, error) { return regs.Insecure(host), nil }),
		docker.WithAuthorizer(docker.NewDockerAuthorizer(docker.WithAuthCreds(func(host string) (string, string, error) {
			ac, ok := regs.Credentials(host)
			switch {
			case !ok:
				return "", "", nil
			case ac.IdentityToken != "":
				return "", ac.IdentityToken, nil
			}
			return ac.Username, ac.Password, nil
		}))),
	)
	return docker.NewResolver(docker.ResolverOptions{Hosts: hosts})
}

// capPull is the image handler of the pull of res that fails it with
// images.ErrVerify once the blobs it fetched add up to more than
// maxBytes.
func capPull(res *registry.Resolved, maxBytes int64) images.HandlerFunc {
	var fetched int64
	var mu sync.Mutex
	return func(_ context.Context, d ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		mu.Lock()
		defer mu.Unlock()
		fetched += d.Size
		if fetched > maxBytes {
			return nil, fmt.Errorf("%w: %s: more than the cap of %d bytes", dshimages.ErrVerify, res.Reference, maxBytes)
		}
		return nil, nil
	}
}

// recordPull records the pulled image target of res, labelled as
// dsh-sandbox's with its source and signers, as the canonical reference
// and, for a tag, also under the tag; then it deletes the record under
// the fully qualified name fq the pull made. It returns the last record
// it made.
func (e *Executor) recordPull(ctx context.Context, res *registry.Resolved, target ocispec.Descriptor, fq string) (images.Image, error) {
	labels := map[string]string{reap.LabelOwner: reap.LabelOwnerValue, labelSource: res.Source}
	if len(res.Signers) > 0 {
		labels[labelSigners] = strings.Join(res.Signers, ",")
	}
	names := []string{res.Pinned}
	if canonPinned, err := dshimages.CanonicalReference(res.Pinned); err == nil {
		names[0] = canonPinned
	}
	if !strings.Contains(res.Reference, "@") {
		names = append(names, res.Reference)
	}
	var out images.Image
	for _, n := range names {
		rec := images.Image{Name: n, Target: target, Labels: labels}
		var err error
		if out, err = e.putImage(ctx, rec); err != nil {
			return images.Image{}, classify(err, "pull %q: record image %s", res.Reference, n)
		}
	}
	// The record under the fully qualified name goes once the canonical
	// records hold the content.
	if fq != names[0] && fq != res.Reference {
		_ = e.cli.ImageService().Delete(ctx, fq)
	}
	return out, nil
}

// putImage creates or replaces the image record rec.
func (e *Executor) putImage(ctx context.Context, rec images.Image) (images.Image, error) {
	is := e.cli.ImageService()
	out, err := is.Create(ctx, rec)
	if cerrdefs.IsAlreadyExists(err) {
		out, err = is.Update(ctx, rec)
	}
	return out, err
}

// fullyQualified is the reference containerd's resolver takes:
// "docker.io/library/tools@…" for a Docker Hub reference.
func fullyQualified(ref string) string {
	if rest, ok := strings.CutPrefix(ref, "index.docker.io/"); ok {
		return "docker.io/" + rest
	}
	if q := qualifiedName(ref); q != "" {
		return q
	}
	return ref
}

// watchProgress sends "layer" events for the ingests of res's layers in
// the content store until stop is called.
func (e *Executor) watchProgress(ctx context.Context, res *registry.Resolved, event func(dshimages.PullEvent)) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			statuses, err := e.cli.ContentStore().ListStatuses(wctx)
			if err == nil {
				for _, st := range statuses {
					for i, l := range res.Layers {
						if strings.HasSuffix(st.Ref, l) {
							event(dshimages.PullEvent{Event: "layer", Layer: l, Index: i + 1, Layers: len(res.Layers), Done: st.Offset, Total: res.LayerSizes[i]})
						}
					}
				}
			}
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-finished }
}

// pullFailure classifies an error of containerd's pull: content that
// does not match its digest is images.ErrVerify, a missing image
// images.ErrNotFound; messages name the reference, never credentials.
func pullFailure(res *registry.Resolved, err error) error {
	if errors.Is(err, dshimages.ErrVerify) {
		return err
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	low := strings.ToLower(msg)
	switch {
	case strings.Contains(low, "digest") || strings.Contains(low, "unexpected commit") || strings.Contains(low, "size"):
		return fmt.Errorf("%w: %s: containerd refused the content it was sent (tampered or corrupt): %s", dshimages.ErrVerify, res.Reference, msg)
	case cerrdefs.IsNotFound(err):
		return fmt.Errorf("%w: %s: %s", dshimages.ErrNotFound, res.Reference, msg)
	}
	return sandbox.Errorf(sandbox.ErrUnavailable, "containerd: pull %s (%s): %s", res.Reference, res.Pinned, msg)
}
