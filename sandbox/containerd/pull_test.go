package containerd

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	dshimages "github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// pulledEnv is the environment of the image pushRunnable pushes.
var pulledEnv = []string{"PATH=" + dshimages.DefaultPath, "FROM_REGISTRY=yes"}

// pushRunnable pushes the busybox test image (with FROM_REGISTRY=yes in
// its environment) to reg as tools:1 and returns its digest.
func pushRunnable(t *testing.T, reg *fixtures.Registry) string {
	t.Helper()
	var tar bytes.Buffer
	if err := dshimages.BusyboxWith(&tar, "bash"); err != nil {
		t.Fatalf("cannot build the busybox test image (install busybox-static and bash): %v", err)
	}
	return reg.Push(t, reg.Ref("tools:1"), fixtures.ImageFromTar(t, tar.Bytes(), pulledEnv...))
}

// repoImages lists the names of the namespace's image records of
// repository.
func repoImages(t *testing.T, e *Executor, repository string) []string {
	t.Helper()
	recs, err := e.cli.ImageService().List(e.ctx(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range recs {
		if strings.Contains(r.Name, repository) {
			out = append(out, r.Name)
		}
	}
	return out
}

// TestPullImage pulls from a loopback registry that needs credentials,
// by tag and by digest, runs a call on the digest and removes the
// images; without credentials, with a wrong digest, unsigned under a
// key, over the cap and with a tampered layer the pull is refused and
// leaves no image record.
func TestPullImage(t *testing.T) {
	e := newTestExecutor(t)
	reg := fixtures.StartRegistry(t)
	digest := pushRunnable(t, reg)
	repo, tag := reg.Ref("tools"), reg.Ref("tools:1")
	t.Cleanup(func() {
		for _, n := range repoImages(t, e, repo) {
			_ = e.cli.ImageService().Delete(e.ctx(context.Background()), n)
		}
	})
	dir := t.TempDir()
	signer := fixtures.NewSigner(t, dir, "signer")
	key, err := dshimages.LoadPublicKey(signer.PublicKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	wrong := "sha256:" + strings.Repeat("ab", 32)
	other := reg.Push(t, repo+":2", fixtures.TestImage(t, map[string]string{"a": "tampered"}))
	reg.Tamper(fixtures.LayerDigest(t, fixtures.TestImage(t, map[string]string{"a": "tampered"})))
	reg.RequireAuth("ci", "s3cret")
	anon, err := dshimages.LoadRegistries("", []string{reg.Host})
	if err != nil {
		t.Fatal(err)
	}
	regs, err := dshimages.LoadRegistries(reg.AuthConfig(t, dir, "ci", "s3cret"), []string{reg.Host})
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, ref string
		o         dshimages.PullOptions
		class     error
		want      string
	}{
		{"no credentials", tag, dshimages.PullOptions{Registries: anon}, nil, "refused access"},
		{"wrong digest", repo + "@" + wrong, dshimages.PullOptions{Registries: regs}, dshimages.ErrNotFound, wrong},
		{"unsigned", tag, dshimages.PullOptions{Registries: regs, Keys: []dshimages.PublicKey{key}}, dshimages.ErrVerify, "is not signed"},
		{"over the cap", tag, dshimages.PullOptions{Registries: regs, MaxBytes: 1024}, dshimages.ErrVerify, "cap"},
		{"tampered layer", repo + "@" + other, dshimages.PullOptions{Registries: regs}, dshimages.ErrVerify, "tampered"},
	} {
		_, err := e.PullImage(t.Context(), tc.ref, tc.o)
		if err == nil || (tc.class != nil && !errors.Is(err, tc.class)) || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%s: %v, want an error (%v) naming %q", tc.name, err, tc.class, tc.want)
		}
		if left := repoImages(t, e, repo); len(left) != 0 {
			t.Errorf("%s: image records after a refused pull: %v", tc.name, left)
		}
	}

	reg.RequireAuth("", "")
	reg.Sign(t, signer, repo, digest, digest)
	reg.RequireAuth("ci", "s3cret")
	var events []dshimages.PullEvent
	img, err := e.PullImage(t.Context(), tag, dshimages.PullOptions{Registries: regs, Keys: []dshimages.PublicKey{key}, Progress: func(ev dshimages.PullEvent) { events = append(events, ev) }})
	if err != nil {
		t.Fatalf("pull by tag: %v", err)
	}
	if img.Name != tag || img.Digest != digest || img.Source != tag || !slices.Equal(img.Signers, []string{key.Fingerprint}) {
		t.Errorf("pulled %+v, want %s with digest %s and the signer", img, tag, digest)
	}
	if !slices.ContainsFunc(events, func(ev dshimages.PullEvent) bool { return ev.Event == "layer" && ev.Done == ev.Total && ev.Total > 0 }) ||
		!slices.ContainsFunc(events, func(ev dshimages.PullEvent) bool { return ev.Event == "stored" }) {
		t.Errorf("events %+v lack a finished layer and stored", events)
	}
	if got := repoImages(t, e, repo); !slices.Contains(got, tag) || !slices.Contains(got, repo+"@"+digest) || len(got) != 2 {
		t.Errorf("image records %v, want %s and %s@%s", got, tag, repo, digest)
	}
	got, err := e.PulledImage(t.Context(), repo+"@"+digest)
	if err != nil || got.Digest != digest || got.Source != tag || !slices.Equal(got.Signers, img.Signers) {
		t.Errorf("PulledImage(digest) = %+v, %v", got, err)
	}
	list, err := e.Images(t.Context())
	if err != nil || !slices.ContainsFunc(list, func(i dshimages.Image) bool { return i.Name == tag && i.Source == tag && i.Digest == digest }) {
		t.Errorf("Images() = %+v, %v; want %s with source and digest", list, err, tag)
	}

	p := testPolicy(t)
	p.Image = repo + "@" + digest
	res, err := e.Run(t.Context(), &sandbox.Request{Command: "echo $FROM_REGISTRY", Policy: p})
	if err != nil || res.ExitCode == nil || *res.ExitCode != 0 || strings.TrimSpace(res.Stdout.Text) != "yes" {
		t.Fatalf("run on %s: %+v, %v", p.Image, res, err)
	}

	if _, err := e.PullImage(t.Context(), repo+"@"+digest, dshimages.PullOptions{Registries: regs}); err != nil {
		t.Errorf("pull by digest: %v", err)
	}
	for _, n := range []string{repo + "@" + digest, tag} {
		if canon, err := e.RemoveImage(t.Context(), n); err != nil || canon != n {
			t.Errorf("RemoveImage(%s) = %q, %v", n, canon, err)
		}
	}
	if left := repoImages(t, e, repo); len(left) != 0 {
		t.Errorf("image records after RemoveImage: %v", left)
	}
}

// TestConformancePulledImage runs the sandboxtest suite, unchanged, on
// an image pulled from a loopback registry without credentials (by tag
// and by digest), named by its digest; the image's environment (with FROM_REGISTRY=yes) is the
// one the suite's exact-environment cases expect, so they see the pulled
// image and not the imported test image.
func TestConformancePulledImage(t *testing.T) {
	testAddress(t)
	reg := fixtures.StartRegistry(t)
	digest := pushRunnable(t, reg)
	repo, tag := reg.Ref("tools"), reg.Ref("tools:1")
	regs, err := dshimages.LoadRegistries("", []string{reg.Host})
	if err != nil {
		t.Fatal(err)
	}
	// The pulls, and the removal of the images once the suite's
	// executor is closed, go through an executor of their own.
	puller := newTestExecutor(t)
	t.Cleanup(func() {
		for _, n := range repoImages(t, puller, repo) {
			_ = puller.cli.ImageService().Delete(puller.ctx(context.Background()), n)
		}
	})
	pinned := repo + "@" + digest
	for _, ref := range []string{tag, pinned} {
		img, err := puller.PullImage(t.Context(), ref, dshimages.PullOptions{Registries: regs})
		if err != nil || img.Digest != digest {
			t.Fatalf("pull %s without credentials: %+v, %v; want digest %s", ref, img, err, digest)
		}
	}
	conformance(t, pinned, pulledEnv)
	if left := repoImages(t, puller, repo); len(left) != 2 {
		t.Errorf("image records of %s after the suite: %v, want the tag and the digest", repo, left)
	}
}
