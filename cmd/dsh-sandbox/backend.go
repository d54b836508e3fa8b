package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/internal/logbridge"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/secrets"
)

// openImages opens the local image store, creating it on first use.
func (s *settings) openImages() (*images.Store, error) {
	st, err := images.OpenStore(filepath.Join(s.dataDir, "images"))
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "image store: %v", err)
	}
	return st, nil
}

// backendConfig is what the backend d reads of the settings; the local
// image store is opened only when d needs it. A backend whose options
// come from the daemon flags is refused to a command without them: it
// would reach the default daemon, not the one the operator named.
func (s *settings) backendConfig(d *backend.Descriptor) (backend.Config, error) {
	opts := s.backendOptions(d.Name)
	if opts != nil && !s.daemons {
		return backend.Config{}, sandbox.Errorf(sandbox.ErrInternal, "backend %s: this command takes no --docker-host, --containerd-address or --containerd-namespace", d.Name)
	}
	log := logbridge.New(s.log)
	cfg := backend.Config{
		Service: driver.Service{StateDir: s.stateDir, Getenv: os.LookupEnv, Logger: log, Detector: detector},
		Options: opts,
	}
	if s.pool != nil {
		// The pool logs its failed prepares and teardowns too.
		opts := *s.pool
		opts.Logger = log
		cfg.Pool = &opts
	}
	if d.Needs.Images {
		imgs, err := s.openImages()
		if err != nil {
			return backend.Config{}, err
		}
		cfg.Images = imgs
	}
	return cfg, nil
}

// flagBackend returns the backend a flag names, among those keep keeps
// (nil: all); another name is a usage error listing them ("a backend"
// plus what, e.g. " with images").
func flagBackend(flag string, name sandbox.Backend, keep func(*backend.Descriptor) bool, what string) (*backend.Descriptor, error) {
	d, ok := backends.Lookup(name)
	if !ok || (keep != nil && !keep(d)) {
		return nil, usageError("%s: %q is not a backend%s (%s)", flag, name, what, sandbox.JoinModes(backends.Names(keep), ", "))
	}
	return d, nil
}

// overridable keeps the backends --backend may name: all but those only a
// policy file may name (local).
func overridable(d *backend.Descriptor) bool { return !d.Explicit }

// overrideFlags are the --backend and --runtime flags of exec and mcp,
// listing the registered backends and runtimes.
func overrideFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "backend", Usage: "override the policy's backend: " + sandbox.JoinModes(backends.Names(overridable), ", ") +
			" (those whose images live in a daemon need --image)"},
		&cli.StringFlag{Name: "runtime", Usage: "override the policy's OCI runtime: " + sandbox.JoinModes(backends.Runtimes(), ", ") +
			" (docker: one the engine has registered)"},
	}
}

// newExecutor builds the backend p names. It never substitutes another
// backend: an unusable one is an error (fail closed).
func (s *settings) newExecutor(p sandbox.Policy) (sandbox.Executor, func(), error) {
	d, ok := backends.Lookup(p.Backend)
	if !ok {
		return nil, nil, sandbox.Errorf(sandbox.ErrInvalid, "policy.backend: unknown backend %q (%s)", p.Backend, sandbox.JoinModes(backends.Names(nil), ", "))
	}
	t := backend.Target{Descriptor: d}
	if len(d.Runtimes) > 0 {
		t.Runtime = cmp.Or(p.Runtime, d.Runtimes[0])
	}
	ex, closeEx, err := s.openTarget(context.Background(), t)
	if err != nil {
		return ex, closeEx, err
	}
	logPull := func(msg string, img *images.Image) {
		s.log.Info().Str("image", img.Name).Str("digest", img.Digest).Str("source", img.Source).Strs("signers", img.Signers).Msg(msg)
	}
	// Calls pull their image as the policy says (pull, verify.keys)
	// before they run: into the local image store, or through the
	// daemon of a backend that pulls.
	if p, ok := ex.(backend.Puller); ok && d.Images == backend.ImagesExecutor {
		return newDaemonPulling(ex, p, s.pull, logPull), closeEx, nil
	}
	if d.Images != backend.ImagesLocal {
		return ex, closeEx, nil
	}
	st, err := s.openImages()
	if err != nil {
		closeEx()
		return nil, nil, err
	}
	return newPulling(ex, st, s.pull, logPull), closeEx, nil
}

// openTarget opens an executor of t; closeEx releases it.
func (s *settings) openTarget(ctx context.Context, t backend.Target) (ex sandbox.Executor, closeEx func(), err error) {
	cfg, err := s.backendConfig(t.Descriptor)
	if err != nil {
		return nil, nil, err
	}
	if ex, err = t.Open(ctx, cfg, t.Runtime); err != nil {
		return nil, nil, err
	}
	closeEx = func() {}
	if c, ok := ex.(io.Closer); ok {
		closeEx = func() { _ = c.Close() }
	}
	return ex, closeEx, nil
}

// reapExecutor removes what dead instances left on ex's backend; an
// executor without leftovers to reap (local) reports nothing.
func reapExecutor(ctx context.Context, ex sandbox.Executor) (reap.Report, error) {
	if r, ok := ex.(backend.Reaper); ok {
		return r.Reap(ctx)
	}
	return reap.Report{}, nil
}

// reapBeforeCalls is reapExecutor for a command about to run calls
// (exec, mcp): an executor that can tell whether there may be leftovers
// (oci: its state directory shows a dead instance) reaps only then, so
// that a call spawns the runtime once; the daemon backends ask their
// daemon, which spawns nothing.
func reapBeforeCalls(ctx context.Context, ex sandbox.Executor) error {
	if r, ok := ex.(backend.DeadReaper); ok {
		_, err := r.ReapDead(ctx)
		return err
	}
	_, err := reapExecutor(ctx, ex)
	return err
}

// imageBackends keeps the backends that have images to manage.
func imageBackends(d *backend.Descriptor) bool { return d.Images != backend.ImagesNone }

// openImageStore connects to the backend d, whose images live in its
// daemon (backend.ImagesExecutor); closeSt releases it.
func (s *settings) openImageStore(ctx context.Context, d *backend.Descriptor) (st backend.ImageStore, closeSt func(), err error) {
	if d.Images != backend.ImagesExecutor {
		return nil, nil, sandbox.Errorf(sandbox.ErrInternal, "backend %s keeps no images in a daemon", d.Name)
	}
	ex, closeEx, err := s.openTarget(ctx, backend.Target{Descriptor: d})
	if err != nil {
		return nil, nil, err
	}
	st, ok := ex.(backend.ImageStore)
	if !ok {
		closeEx()
		return nil, nil, sandbox.Errorf(sandbox.ErrInternal, "backend %s has no image store", d.Name)
	}
	return st, closeEx, nil
}

// importIntoDaemon loads an image into a daemon backend. The file goes
// through the local store's importer first, in a temporary store, so
// that every format it reads works and its checks (no path traversal,
// no links leaving the root, no devices, no setuid) apply whatever the
// backend; the checked root filesystem is then streamed to the daemon.
// progress gets the phase ("unpacking", "loading") with its counts.
func (s *settings) importIntoDaemon(ctx context.Context, d *backend.Descriptor, file, imageName string, progress func(phase string, done, total int64)) (*images.Image, error) {
	if err := os.MkdirAll(s.dataDir, 0o700); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "data directory: %v", err)
	}
	staging, err := os.MkdirTemp(s.dataDir, ".import-")
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "data directory: %v", err)
	}
	defer os.RemoveAll(staging)

	ex, closeEx, err := s.openImageStore(ctx, d)
	if err != nil {
		return nil, err
	}
	defer closeEx()

	st, err := images.OpenStore(staging)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "staging store: %v", err)
	}
	var unpack func(done, total int64)
	if progress != nil {
		unpack = func(done, total int64) { progress("unpacking", done, total) }
	}
	img, err := st.Import(ctx, file, imageName, unpack)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		var load func(done int64)
		if progress != nil {
			load = func(done int64) { progress("loading", done, img.Size) }
		}
		pw.CloseWithError(images.WriteRootfsTar(ctx, pw, img, load))
	}()
	err = ex.ImportRootfs(ctx, pr, img.Name, img.Env)
	pr.CloseWithError(fmt.Errorf("import ended"))
	if err != nil {
		return nil, err
	}
	// The daemon names the image by its own digest and size: report what
	// `images list` shows, not the staging copy's.
	listed, err := ex.Images(ctx)
	if err != nil {
		return nil, err
	}
	for _, l := range listed {
		if l.Name == img.Name {
			img.Digest, img.Size, img.Imported = l.Digest, l.Size, l.Imported
			return img, nil
		}
	}
	return nil, sandbox.Errorf(sandbox.ErrInternal, "images import: %s imported, but the backend does not list it", img.Name)
}

// listImages lists the images of backend d: the local store's, or those
// dsh-sandbox imported into its daemon.
func (s *settings) listImages(ctx context.Context, d *backend.Descriptor) ([]images.Image, error) {
	if d.Images == backend.ImagesExecutor {
		st, closeSt, err := s.openImageStore(ctx, d)
		if err != nil {
			return nil, err
		}
		defer closeSt()
		return st.Images(ctx)
	}
	st, err := s.openImages()
	if err != nil {
		return nil, err
	}
	return st.List()
}

// redacting is an executor whose outcomes have the call's secrets
// replaced in the egress record and the error text
// (secrets.RedactOutcome), as the service's are: for front ends that hand
// results to a model (mcp).
type redacting struct{ sandbox.Executor }

func (r redacting) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	res, err := r.Executor.Run(ctx, req)
	return secrets.RedactOutcome(req.Policy, detector, res, err)
}
