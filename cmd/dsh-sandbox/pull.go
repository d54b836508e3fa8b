package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/images/registry"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/pool"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// registryFlags are the global flags of the operator's registry
// configuration: pulls read credentials and plain-HTTP registries from
// them alone, never from a request or a policy.
func registryFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "registry-auth", Usage: "docker-style config.json `FILE` with the operator's registry credentials (\"auths\" entries; credential helpers are refused); requests never carry credentials", EnvVars: envVar("registry-auth")},
		&cli.StringFlag{Name: "insecure-registries", Usage: "`HOSTS` (comma-separated host[:port]) reached over plain HTTP; any other registry, loopback included, only over HTTPS", EnvVars: envVar("insecure-registries")},
		&cli.StringFlag{Name: "max-pull-bytes", Value: "8Gi", Usage: "`SIZE` cap of one pulled image (compressed layers and configuration, as declared and as read); a larger image fails before any layer is fetched", EnvVars: envVar("max-pull-bytes")},
	}
}

// pullSettings are the registry flags, read by loadSettings; the
// credentials file is read when a pull needs it.
type pullSettings struct {
	authFile string
	insecure []string
	maxBytes int64

	once sync.Once
	regs *images.Registries
	err  error
}

// loadPullSettings checks the registry flags.
func loadPullSettings(f *flags) (*pullSettings, error) {
	ps := &pullSettings{}
	if v := f.String("registry-auth"); v != "" {
		abs, err := absFlag("registry-auth", v)
		if err != nil {
			return nil, err
		}
		ps.authFile = abs
	}
	for _, h := range strings.Split(f.String("insecure-registries"), ",") {
		if h = strings.TrimSpace(h); h != "" {
			ps.insecure = append(ps.insecure, h)
		}
	}
	if _, err := images.LoadRegistries("", ps.insecure); err != nil {
		return nil, usageError("--insecure-registries: %v", err)
	}
	n, err := policy.ParseSize(f.String("max-pull-bytes"))
	if err != nil || n <= 0 {
		return nil, usageError("--max-pull-bytes: %q: want a positive size such as 8Gi or 512Mi", f.String("max-pull-bytes"))
	}
	ps.maxBytes = n
	return ps, nil
}

// registries reads the operator's registry configuration once.
func (ps *pullSettings) registries() (*images.Registries, error) {
	ps.once.Do(func() {
		ps.regs, ps.err = images.LoadRegistries(ps.authFile, ps.insecure)
		if ps.err != nil {
			ps.err = sandbox.Errorf(sandbox.ErrInvalid, "--registry-auth: %v", ps.err)
		}
	})
	return ps.regs, ps.err
}

// loadKeys loads the public keys of a verify list; field names the list
// in errors ("policy.verify.keys", "--verify-key").
func loadKeys(field string, files []string) ([]images.PublicKey, error) {
	var keys []images.PublicKey
	for i, f := range files {
		k, err := images.LoadPublicKey(f)
		if err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "%s[%d]: %v", field, i, err)
		}
		keys = append(keys, k)
	}
	return keys, nil
}

// pullError gives an error of a pull its class: a refused image
// (verification, digest, size cap) and a malformed reference are
// invalid, a missing image not found, the rest unavailable.
func pullError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, sandbox.ErrInvalid), errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrUnavailable):
		return err
	case errors.Is(err, images.ErrVerify), errors.Is(err, images.ErrInvalid):
		return sandbox.Errorf(sandbox.ErrInvalid, "%w", err)
	case errors.Is(err, images.ErrNotFound):
		return sandbox.Errorf(sandbox.ErrNotFound, "%w", err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return sandbox.Errorf(sandbox.ErrUnavailable, "%w", err)
	}
	return sandbox.Errorf(sandbox.ErrUnavailable, "%w", err)
}

// imageOrigin is where a pulling executor finds and pulls images: the
// local image store, or a daemon that pulls itself (backend.Puller).
type imageOrigin interface {
	// get returns the image ref names; images.ErrNotFound when absent.
	get(ctx context.Context, ref string) (*images.Image, error)
	pull(ctx context.Context, ref string, o images.PullOptions) (*images.Image, error)
	// run is the image reference a call on img runs, given the policy's
	// image name.
	run(img *images.Image, name string) string
}

// storeSource is the local image store: every image, pulled or
// imported, runs by its digest reference.
type storeSource struct{ st *images.Store }

func (s storeSource) get(_ context.Context, ref string) (*images.Image, error) { return s.st.Get(ref) }
func (s storeSource) pull(ctx context.Context, ref string, o images.PullOptions) (*images.Image, error) {
	return registry.Pull(ctx, s.st, ref, o)
}
func (storeSource) run(img *images.Image, _ string) string { return pinnedRef(img) }

// daemonSource is a daemon that pulls: a pulled image runs by its
// digest reference, an imported one by its name (the daemon knows it by
// no digest reference).
type daemonSource struct{ p backend.Puller }

func (d daemonSource) get(ctx context.Context, ref string) (*images.Image, error) {
	return d.p.PulledImage(ctx, ref)
}
func (d daemonSource) pull(ctx context.Context, ref string, o images.PullOptions) (*images.Image, error) {
	return d.p.PullImage(ctx, ref, o)
}
func (daemonSource) run(img *images.Image, name string) string {
	if img.Source == "" {
		return name
	}
	return pinnedRef(img)
}

// pulling is the executor of a backend that pulls images (the local
// image store's, or a daemon's): before each call it makes sure the
// policy's image is there as policy.pull and policy.verify ask (pulling
// it when needed), then runs the call on that image named by its
// digest, so that the call runs exactly the image that was checked even
// when another pull replaces the tag meanwhile, and records the digest
// in the result when the backend did not. It forwards Close and reaping
// to the backend's executor.
type pulling struct {
	sandbox.Executor
	src   imageOrigin
	store *images.Store // the local store, for reaping its staging; nil for a daemon
	ps    *pullSettings
	log   func(msg string, img *images.Image)

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func newPulling(ex sandbox.Executor, st *images.Store, ps *pullSettings, log func(string, *images.Image)) *pulling {
	return &pulling{Executor: ex, src: storeSource{st}, store: st, ps: ps, log: log, locks: map[string]*sync.Mutex{}}
}

// newDaemonPulling is newPulling for an executor whose daemon pulls.
func newDaemonPulling(ex sandbox.Executor, p backend.Puller, ps *pullSettings, log func(string, *images.Image)) *pulling {
	return &pulling{Executor: ex, src: daemonSource{p}, ps: ps, log: log, locks: map[string]*sync.Mutex{}}
}

// PoolSize forwards the backend executor's warm pool size (the
// dsh_sandbox_pool_ready and _preparing gauges); zero without a pool.
func (p *pulling) PoolSize() pool.Size {
	if ps, ok := p.Executor.(interface{ PoolSize() pool.Size }); ok {
		return ps.PoolSize()
	}
	return pool.Size{}
}

// Pooled forwards whether the backend executor keeps a warm pool.
func (p *pulling) Pooled() bool {
	pe, ok := p.Executor.(interface{ Pooled() bool })
	return ok && pe.Pooled()
}

// lock serializes the pulls of one reference.
func (p *pulling) lock(ref string) func() {
	p.mu.Lock()
	m, ok := p.locks[ref]
	if !ok {
		m = &sync.Mutex{}
		p.locks[ref] = m
	}
	p.mu.Unlock()
	m.Lock()
	return m.Unlock
}

func (p *pulling) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	pinned, img, err := p.ensure(ctx, req.Policy)
	if err != nil {
		return nil, err
	}
	r := req
	if pinned != "" && pinned != req.Policy.Image {
		c := *req
		c.Policy.Image = pinned
		r = &c
	}
	res, err := p.Executor.Run(ctx, r)
	if res != nil && img != nil {
		// The result names the image as the policy does, and the digest
		// the call ran.
		if res.Sandbox.Image == pinned {
			res.Sandbox.Image = req.Policy.Image
		}
		if res.Sandbox.ImageDigest == "" {
			res.Sandbox.ImageDigest = img.Digest
		}
	}
	return res, err
}

// ensure makes the image of pol present (and verified) per its pull and
// verify fields, and returns the digest reference to run
// ("repository@sha256:…"; an image imported into a daemon runs by its
// name) with the image, or "" and nil for the host image.
func (p *pulling) ensure(ctx context.Context, pol sandbox.Policy) (string, *images.Image, error) {
	if pol.Image == "" || pol.Image == images.HostName {
		return "", nil, nil
	}
	ref, err := images.CanonicalReference(pol.Image)
	if err != nil {
		return "", nil, sandbox.Errorf(sandbox.ErrInvalid, "policy.image: %v", err)
	}
	keys, err := loadKeys("policy.verify.keys", pol.VerifyKeys)
	if err != nil {
		return "", nil, err
	}
	mode := pol.Pull.Or()
	unlock := p.lock(ref)
	defer unlock()
	have, err := p.src.get(ctx, ref)
	switch {
	case errors.Is(err, images.ErrNotFound):
		have = nil
	case err != nil:
		return "", nil, pullError(fmt.Errorf("policy.image %q: %w", pol.Image, err))
	}
	verified := have != nil && signedBy(have, keys)
	switch {
	case mode == sandbox.PullAlways, have == nil && mode == sandbox.PullMissing, have != nil && !verified && mode == sandbox.PullMissing:
	case have == nil:
		return "", nil, sandbox.Errorf(sandbox.ErrNotFound, "policy.image %q is not in the image store and policy.pull is never (images pull %s)", pol.Image, ref)
	case !verified:
		return "", nil, sandbox.Errorf(sandbox.ErrInvalid, "policy.image %q (%s) has no signature verified by policy.verify.keys and policy.pull is never; nothing ran (images pull --verify-key FILE %s)", pol.Image, have.Digest, ref)
	default:
		return p.src.run(have, pol.Image), have, nil
	}
	regs, err := p.ps.registries()
	if err != nil {
		return "", nil, err
	}
	img, err := p.src.pull(ctx, ref, images.PullOptions{Registries: regs, MaxBytes: p.ps.maxBytes, Keys: keys})
	if err != nil {
		return "", nil, pullError(fmt.Errorf("policy.image %q: nothing ran: %w", pol.Image, err))
	}
	p.log("pulled image", img)
	return p.src.run(img, pol.Image), img, nil
}

// signedBy reports whether img was verified with one of keys when it was
// pulled; true when keys is empty.
func signedBy(img *images.Image, keys []images.PublicKey) bool {
	if len(keys) == 0 {
		return true
	}
	return slices.ContainsFunc(keys, func(k images.PublicKey) bool { return slices.Contains(img.Signers, k.Fingerprint) })
}

// pinnedRef is the digest reference of a stored image.
func pinnedRef(img *images.Image) string {
	repo := img.Name
	if i := strings.LastIndexByte(repo, '@'); i >= 0 {
		repo = repo[:i]
	} else if i := strings.LastIndexByte(repo, ':'); i > strings.LastIndexByte(repo, '/') {
		repo = repo[:i]
	}
	return repo + "@" + img.Digest
}

func (p *pulling) Close() error {
	if c, ok := p.Executor.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

func (p *pulling) Reap(ctx context.Context) (reap.Report, error) {
	rep, err := reapExecutor(ctx, p.Executor)
	if p.store == nil {
		return rep, err
	}
	return rep, errors.Join(err, reapStaging(p.store, &rep))
}

func (p *pulling) ReapDead(ctx context.Context) (reap.Report, error) {
	var rep reap.Report
	var err error
	if r, ok := p.Executor.(backend.DeadReaper); ok {
		rep, err = r.ReapDead(ctx)
	} else {
		rep, err = reapExecutor(ctx, p.Executor)
	}
	if p.store == nil {
		return rep, err
	}
	return rep, errors.Join(err, reapStaging(p.store, &rep))
}

// reapStaging removes what dead imports and pulls left in the local image
// store's staging directory, adding it to rep.Files.
func reapStaging(st *images.Store, rep *reap.Report) error {
	removed, err := st.ReapStaging()
	rep.Files = append(rep.Files, removed...)
	if err != nil {
		return sandbox.Errorf(sandbox.ErrUnavailable, "image store: %v", err)
	}
	return nil
}

func imagesPullCommand() *cli.Command {
	return &cli.Command{
		Name:      "pull",
		Usage:     "pull an image from its registry (by tag or by digest) into a backend's images",
		ArgsUsage: "REF",
		Description: `Fetches REF from its registry into the local image store (--backend oci, the default),
or has the Docker engine or containerd pull it (--backend docker, containerd) after the same
checks of digest, signature and declared size: the daemon pulls exactly the checked digest.
REF is NAME[:TAG] or NAME@sha256:<64 hex digits> (NAME as for images import; a name
without a registry is on Docker Hub). A digest gets exactly that image or fails. Every
layer and the configuration are checked against their digests as they are read; the
manifest's declared size is checked against --max-pull-bytes before any layer is fetched;
the image appears only when all of it checked out. With --verify-key, the image must carry
a cosign-compatible key-based signature (cosign sign --key) by one of the keys, checked
before any layer is fetched; the verified keys are recorded, so a policy with the same
verify.keys runs the image without pulling it again.

Credentials come only from the operator: --registry-auth names a docker-style config.json;
plain HTTP only to the registries --insecure-registries lists (loopback included).

Progress (layers, bytes) is drawn on a terminal; --json writes one JSON event per line
(resolved, verified, layer, then pulled with the image), for scripts.

Examples:
   dsh-sandbox images pull 127.0.0.1:5000/tools:1 --insecure-registries 127.0.0.1:5000
   dsh-sandbox images pull --registry-auth /etc/dsh-sandbox/registry.json registry.example/ci/golang:1.26
   dsh-sandbox images pull --verify-key /etc/dsh-sandbox/cosign.pub registry.example/ci/tools@sha256:…
   dsh-sandbox images pull --backend docker --insecure-registries 127.0.0.1:5000 127.0.0.1:5000/tools:1
   dsh-sandbox images list`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "backend", Value: "oci", Usage: "backend to pull into: oci (the local image store), docker (through the engine) or containerd"},
			&cli.StringSliceFlag{Name: "verify-key", Usage: "PEM public key `FILE` of which one must have signed the image (repeatable)"},
			jsonFlag,
		}, daemonFlags()...),
		Action: runImagesPull,
	}
}

// runImagesPull is images pull.
func runImagesPull(c *cli.Context) error {
	if c.NArg() != 1 {
		return usageError("images pull takes one REF, got %d arguments", c.NArg())
	}
	bd, err := imageBackend(c)
	if err != nil {
		return err
	}
	ref, err := images.CanonicalReference(c.Args().First())
	if err != nil {
		return usageError("REF: %v", err)
	}
	keys, err := loadKeys("--verify-key", c.StringSlice("verify-key"))
	if err != nil {
		return err
	}
	s, err := loadSettings(c)
	if err != nil {
		return err
	}
	regs, err := s.pull.registries()
	if err != nil {
		return err
	}
	opts := images.PullOptions{Registries: regs, MaxBytes: s.pull.maxBytes, Keys: keys, Progress: pullDisplay(c)}
	var img *images.Image
	if bd.Images == backend.ImagesLocal {
		st, err := s.openImages()
		if err != nil {
			return err
		}
		img, err = registry.Pull(c.Context, st, ref, opts)
		if err != nil {
			return pullError(err)
		}
	} else {
		st, closeSt, err := s.openImageStore(c.Context, bd)
		if err != nil {
			return err
		}
		defer closeSt()
		p, ok := st.(backend.Puller)
		if !ok {
			return usageError("--backend %s: images pull is not supported by %s; import the image into it", bd.Name, bd.Name)
		}
		if img, err = p.PullImage(c.Context, ref, opts); err != nil {
			return pullError(err)
		}
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, struct {
			Event   string        `json:"event"`
			Backend string        `json:"backend"`
			Image   *images.Image `json:"image"`
		}{"pulled", string(bd.Name), img})
	}
	fmt.Fprintf(c.App.Writer, "pulled %s into %s (%s, %d bytes) from %s\n", img.Name, bd.Name, img.Digest, img.Size, img.Source)
	for _, sg := range img.Signers {
		fmt.Fprintf(c.App.Writer, "signature verified: key %s\n", sg)
	}
	return nil
}

// pullDisplay returns the progress callback of images pull: JSON events
// on stdout with --json (layer events at most every 250 ms per layer,
// and at each layer's start and end), a progress bar per layer (its
// index, digest and size) on a terminal, else nothing.
func pullDisplay(c *cli.Context) func(images.PullEvent) {
	if c.Bool("json") {
		var last time.Time
		w := c.App.Writer
		return func(e images.PullEvent) {
			if e.Event == "layer" && e.Done != 0 && e.Done != e.Total && time.Since(last) < 250*time.Millisecond {
				return
			}
			last = time.Now()
			_ = writeJSON(w, e)
		}
	}
	bar := progressBar(c.App.ErrWriter)
	if bar == nil {
		return nil
	}
	w := c.App.ErrWriter
	return func(e images.PullEvent) {
		switch e.Event {
		case "resolved":
			fmt.Fprintf(w, "%s: %s\n", e.Reference, e.Digest)
		case "verified":
			fmt.Fprintf(w, "signature verified: key %s\n", e.Signer)
		case "layer":
			bar(fmt.Sprintf("layer %d/%d %.19s (%d bytes)", e.Index, e.Layers, e.Layer, e.Total), e.Done, e.Total)
		case "stored":
			fmt.Fprintln(w)
		}
	}
}
