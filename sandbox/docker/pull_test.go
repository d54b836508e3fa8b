package docker

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/image"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// pullFixture is a loopback registry holding a runnable busybox image
// as tools:1, and the executor's registry configuration for it.
type pullFixture struct {
	reg    *fixtures.Registry
	regs   *images.Registries
	img    string // reg.Ref("tools:1")
	digest string
}

func newPullFixture(t *testing.T, e *Executor, authFile string) *pullFixture {
	t.Helper()
	var tar bytes.Buffer
	if err := testRootfsTar(&tar); err != nil {
		t.Fatal(err)
	}
	reg := fixtures.StartRegistry(t)
	f := &pullFixture{reg: reg, img: reg.Ref("tools:1")}
	f.digest = reg.Push(t, f.img, fixtures.ImageFromTar(t, tar.Bytes(), "PATH="+images.DefaultPath, "FROM_REGISTRY=yes"))
	regs, err := images.LoadRegistries(authFile, []string{reg.Host})
	if err != nil {
		t.Fatal(err)
	}
	f.regs = regs
	t.Cleanup(func() { removeRepo(e, reg.Ref("tools")) })
	return f
}

// removeRepo removes every image of repository from the engine.
func removeRepo(e *Executor, repository string) {
	ctx := context.Background()
	imgs, err := e.cli.ImageList(ctx, image.ListOptions{All: true})
	if err != nil {
		return
	}
	for _, img := range imgs {
		for _, n := range append(img.RepoTags, img.RepoDigests...) {
			if strings.HasPrefix(n, repository+":") || strings.HasPrefix(n, repository+"@") {
				_, _ = e.cli.ImageRemove(ctx, img.ID, image.RemoveOptions{Force: true, PruneChildren: true})
				break
			}
		}
	}
}

// assertNotInEngine checks that the engine has no image of repository.
func assertNotInEngine(t *testing.T, e *Executor, repository string) {
	t.Helper()
	imgs, err := e.cli.ImageList(t.Context(), image.ListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, img := range imgs {
		for _, n := range append(img.RepoTags, img.RepoDigests...) {
			if strings.HasPrefix(n, repository) {
				t.Errorf("the engine has %s after a refused pull", n)
			}
		}
	}
}

// TestPullImageByTagAndDigest pulls a loopback registry's image by tag
// and by digest through the engine, runs a call on it by digest and
// removes it; a digest the registry lacks is refused with nothing
// pulled.
func TestPullImageByTagAndDigest(t *testing.T) {
	e := newTestExecutor(t)
	f := newPullFixture(t, e, "")
	repo := f.reg.Ref("tools")

	wrong := "sha256:" + strings.Repeat("ab", 32)
	if _, err := e.PullImage(t.Context(), repo+"@"+wrong, images.PullOptions{Registries: f.regs}); !errors.Is(err, images.ErrNotFound) || !strings.Contains(err.Error(), wrong) {
		t.Errorf("pull of a digest the registry lacks: %v, want ErrNotFound naming it", err)
	}
	assertNotInEngine(t, e, repo)

	var events []images.PullEvent
	img, err := e.PullImage(t.Context(), f.img, images.PullOptions{Registries: f.regs, Progress: func(ev images.PullEvent) { events = append(events, ev) }})
	if err != nil {
		t.Fatalf("pull by tag: %v", err)
	}
	if img.Name != f.img || img.Digest != f.digest || img.Source != f.img {
		t.Errorf("pulled %+v, want %s with digest %s", img, f.img, f.digest)
	}
	kinds := map[string]bool{}
	for _, ev := range events {
		kinds[ev.Event] = true
		if ev.Event == "layer" && (ev.Layers != 1 || ev.Total <= 0 || ev.Done > ev.Total) {
			t.Errorf("layer event out of range: %+v", ev)
		}
	}
	for _, k := range []string{"resolved", "layer", "stored"} {
		if !kinds[k] {
			t.Errorf("no %q event among %+v", k, events)
		}
	}
	inspect, err := e.cli.ImageInspect(t.Context(), f.img)
	if err != nil || !hasRepoDigest(inspect.RepoDigests, repo+"@"+f.digest) {
		t.Fatalf("the engine's %s: %v, %v; want repo digest %s", f.img, inspect.RepoDigests, err, f.digest)
	}
	got, err := e.PulledImage(t.Context(), f.img)
	if err != nil || got.Digest != f.digest || got.Source != f.img {
		t.Errorf("PulledImage(%s) = %+v, %v", f.img, got, err)
	}
	list, err := e.Images(t.Context())
	if err != nil || !slices.ContainsFunc(list, func(i images.Image) bool { return i.Name == f.img && i.Digest == f.digest && i.Source == f.img }) {
		t.Errorf("Images() = %+v, %v; want %s with its digest and source", list, err, f.img)
	}

	// A call on the digest reference runs exactly that image.
	p := testPolicy(t)
	p.Image = repo + "@" + f.digest
	res, err := e.Run(t.Context(), &sandbox.Request{Command: "echo $FROM_REGISTRY", Policy: p})
	if err != nil || res.ExitCode == nil || *res.ExitCode != 0 || strings.TrimSpace(res.Stdout.Text) != "yes" {
		t.Fatalf("run on %s: %+v, %v", p.Image, res, err)
	}

	pinned, err := e.PullImage(t.Context(), repo+"@"+f.digest, images.PullOptions{Registries: f.regs})
	if err != nil || pinned.Digest != f.digest || pinned.Name != repo+"@"+f.digest {
		t.Fatalf("pull by digest: %+v, %v", pinned, err)
	}
	for _, n := range []string{repo + "@" + f.digest, f.img} {
		if canon, err := e.RemoveImage(t.Context(), n); err != nil || canon != n {
			t.Errorf("RemoveImage(%s) = %q, %v", n, canon, err)
		}
		if _, err := e.PulledImage(t.Context(), n); !errors.Is(err, images.ErrNotFound) {
			t.Errorf("PulledImage(%s) after RemoveImage = %v, want ErrNotFound", n, err)
		}
	}
	assertNotInEngine(t, e, repo)
	if len(e.records()) != 0 {
		t.Errorf("pull records left after removal: %+v", e.records())
	}
}

// TestPullImageCredentials pulls from a registry that needs
// credentials: without the operator's config.json the pull is refused,
// with it the engine pulls (it must get them: the registry asks every
// request).
func TestPullImageCredentials(t *testing.T) {
	e := newTestExecutor(t)
	f := newPullFixture(t, e, "")
	f.reg.RequireAuth("ci", "s3cret")
	_, err := e.PullImage(t.Context(), f.img, images.PullOptions{Registries: f.regs})
	if err == nil || !strings.Contains(err.Error(), "refused access") || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("pull without credentials: %v, want a refusal naming no secret", err)
	}
	assertNotInEngine(t, e, f.reg.Ref("tools"))
	regs, err := images.LoadRegistries(f.reg.AuthConfig(t, t.TempDir(), "ci", "s3cret"), []string{f.reg.Host})
	if err != nil {
		t.Fatal(err)
	}
	img, err := e.PullImage(t.Context(), f.img, images.PullOptions{Registries: regs})
	if err != nil || img.Digest != f.digest {
		t.Fatalf("pull with the operator's credentials: %+v, %v", img, err)
	}
	first, err := e.cli.ImageInspect(t.Context(), f.img)
	if err != nil {
		t.Fatal(err)
	}

	// The tag moves to new content: pulling it again replaces the image,
	// and the replaced one, unused, is removed.
	f.reg.RequireAuth("", "")
	moved := f.reg.Push(t, f.img, fixtures.TestImage(t, map[string]string{"a": "moved"}))
	f.reg.RequireAuth("ci", "s3cret")
	again, err := e.PullImage(t.Context(), f.img, images.PullOptions{Registries: regs})
	if err != nil || again.Digest != moved {
		t.Fatalf("pull of the moved tag: %+v, %v; want digest %s", again, err, moved)
	}
	if _, err := e.cli.ImageInspect(t.Context(), first.ID); !isNotFound(err) {
		t.Errorf("the replaced image %s is still in the engine: %v", first.ID, err)
	}
	if rep, err := e.Reap(t.Context()); err != nil {
		t.Errorf("Reap() = %+v, %v", rep, err)
	}
	if got, err := e.PulledImage(t.Context(), f.img); err != nil || got.Digest != moved {
		t.Errorf("PulledImage after Reap = %+v, %v; want the moved tag's image", got, err)
	}
}

// TestPullImageRefusals: a tampered layer, a signature that is missing
// or by another key, and an image over the size cap are refused and
// leave nothing in the engine; the signed image under the right key, and
// the same image within the cap, pull.
func TestPullImageRefusals(t *testing.T) {
	e := newTestExecutor(t)
	f := newPullFixture(t, e, "")
	repo := f.reg.Ref("tools")
	dir := t.TempDir()
	signer := fixtures.NewSigner(t, dir, "signer")
	stranger := fixtures.NewSigner(t, dir, "stranger")
	key, err := images.LoadPublicKey(signer.PublicKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	strangerKey, err := images.LoadPublicKey(stranger.PublicKeyFile)
	if err != nil {
		t.Fatal(err)
	}

	if _, err := e.PullImage(t.Context(), f.img, images.PullOptions{Registries: f.regs, Keys: []images.PublicKey{key}}); !errors.Is(err, images.ErrVerify) || !strings.Contains(err.Error(), "is not signed") {
		t.Errorf("unsigned: %v, want ErrVerify \"is not signed\"", err)
	}
	f.reg.Sign(t, signer, repo, f.digest, f.digest)
	if _, err := e.PullImage(t.Context(), f.img, images.PullOptions{Registries: f.regs, Keys: []images.PublicKey{strangerKey}}); !errors.Is(err, images.ErrVerify) || !strings.Contains(err.Error(), "does not verify") {
		t.Errorf("other key: %v, want ErrVerify \"does not verify\"", err)
	}
	if _, err := e.PullImage(t.Context(), f.img, images.PullOptions{Registries: f.regs, MaxBytes: 1024}); !errors.Is(err, images.ErrVerify) || !strings.Contains(err.Error(), "cap") {
		t.Errorf("over the cap: %v, want ErrVerify naming the cap", err)
	}
	assertNotInEngine(t, e, repo)

	// A tampered layer: the engine checks the content against its
	// digest and refuses it.
	other := f.reg.Push(t, repo+":2", fixtures.TestImage(t, map[string]string{"a": "tampered"}))
	layerImg := fixtures.TestImage(t, map[string]string{"a": "tampered"})
	f.reg.Tamper(fixtures.LayerDigest(t, layerImg))
	if _, err := e.PullImage(t.Context(), repo+":2", images.PullOptions{Registries: f.regs}); err == nil || !errors.Is(err, images.ErrVerify) {
		t.Errorf("tampered layer: %v, want ErrVerify", err)
	}
	if _, err := e.cli.ImageInspect(t.Context(), repo+"@"+other); !isNotFound(err) {
		t.Errorf("the engine has the tampered image: %v", err)
	}
	assertNotInEngine(t, e, repo)

	img, err := e.PullImage(t.Context(), f.img, images.PullOptions{Registries: f.regs, Keys: []images.PublicKey{key}})
	if err != nil || !slices.Equal(img.Signers, []string{key.Fingerprint}) {
		t.Fatalf("signed image under its key: %+v, %v", img, err)
	}
	if got, err := e.PulledImage(t.Context(), f.img); err != nil || !slices.Equal(got.Signers, img.Signers) {
		t.Errorf("the pull record lost the signers: %+v, %v", got, err)
	}
}

// TestEngineInsecure: a plain-HTTP registry the operator lists is
// pulled through the engine only when the engine reaches it over plain
// HTTP too (loopback, by its default 127.0.0.0/8); another is refused,
// naming the registry and the engine's setting.
func TestEngineInsecure(t *testing.T) {
	e := newTestExecutor(t)
	if err := e.engineInsecure(t.Context(), "127.0.0.1:5000"); err != nil {
		t.Errorf("loopback registry: %v, want nil (the engine's default insecure 127.0.0.0/8)", err)
	}
	err := e.engineInsecure(t.Context(), "registry.invalid:5000")
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "registry.invalid:5000") || !strings.Contains(err.Error(), "insecure-registries") {
		t.Errorf("registry the engine reaches over HTTPS only: %v, want ErrInvalid naming it and the engine's insecure-registries", err)
	}
}

// TestConformancePulledImage runs the sandboxtest suite, unchanged, on
// an image the engine pulled from a loopback registry, named by its
// digest; the image's environment (with FROM_REGISTRY=yes) is the one
// the suite's exact-environment cases expect, so they see the pulled
// image and not the imported test image.
func TestConformancePulledImage(t *testing.T) {
	requireEngine(t)
	var tar bytes.Buffer
	if err := testRootfsTar(&tar); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + images.DefaultPath, "FROM_REGISTRY=yes"}
	reg := fixtures.StartRegistry(t)
	tag := reg.Ref("conformance:1")
	digest := reg.Push(t, tag, fixtures.ImageFromTar(t, tar.Bytes(), env...))
	regs, err := images.LoadRegistries("", []string{reg.Host})
	if err != nil {
		t.Fatal(err)
	}
	// The pull, and the removal of the image once the suite's executor
	// is closed, go through an executor of their own.
	puller := newTestExecutor(t)
	t.Cleanup(func() { removeRepo(puller, reg.Ref("conformance")) })
	img, err := puller.PullImage(t.Context(), tag, images.PullOptions{Registries: regs})
	if err != nil || img.Digest != digest {
		t.Fatalf("pull %s: %+v, %v; want digest %s", tag, img, err, digest)
	}
	conformance(t, reg.Ref("conformance")+"@"+digest, env)
}
