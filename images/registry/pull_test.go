package registry

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
)

// tmpDir is the store's staging directory, under its root.
const tmpDir = ".tmp"

// insecureRegs lists the test registry as reachable over plain HTTP.
func insecureRegs(t *testing.T, reg *fixtures.Registry, authFile string) *images.Registries {
	t.Helper()
	r, err := images.LoadRegistries(authFile, []string{reg.Host})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func readFile(t *testing.T, img *images.Image, p string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(img.Rootfs, p))
	if err != nil {
		t.Fatalf("%s in %s: %v", p, img.Name, err)
	}
	return string(data)
}

// assertNothingStored checks that no image and no staging leftover is in
// the store.
func assertNothingStored(t *testing.T, st *images.Store) {
	t.Helper()
	imgs, err := st.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(imgs) != 0 {
		t.Errorf("store holds %v after a refused pull, want nothing", imgs)
	}
	left, _ := os.ReadDir(filepath.Join(st.Root(), tmpDir))
	if len(left) != 0 {
		t.Errorf("staging leftovers after a refused pull: %v", left)
	}
}

func TestPullByTagAndDigest(t *testing.T) {
	reg := fixtures.StartRegistry(t)
	img := fixtures.TestImage(t, map[string]string{"etc/": "", "etc/motd": "from the registry\n"}, "PATH=/bin", "GREETING=hi")
	digest := reg.Push(t, reg.Ref("tools:1"), img)
	st, err := images.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	regs := insecureRegs(t, reg, "")
	var events []images.PullEvent
	got, err := Pull(context.Background(), st, reg.Ref("tools:1"), images.PullOptions{Registries: regs, Progress: func(e images.PullEvent) { events = append(events, e) }})
	if err != nil {
		t.Fatalf("pull by tag: %v", err)
	}
	if got.Name != reg.Ref("tools:1") || got.Digest != digest || got.Source != reg.Ref("tools:1") {
		t.Errorf("pulled %+v, want name and source %s, digest %s", got, reg.Ref("tools:1"), digest)
	}
	if s := readFile(t, got, "etc/motd"); s != "from the registry\n" {
		t.Errorf("etc/motd = %q", s)
	}
	if !slices.Contains(got.Env, "GREETING=hi") {
		t.Errorf("env %v lacks the image's GREETING=hi", got.Env)
	}
	kinds := map[string]bool{}
	for _, e := range events {
		kinds[e.Event] = true
		if e.Event == "layer" && (e.Total <= 0 || e.Done > e.Total || e.Layers != 1) {
			t.Errorf("layer event %+v out of range", e)
		}
	}
	for _, k := range []string{"resolved", "layer", "stored"} {
		if !kinds[k] {
			t.Errorf("no %q event among %+v", k, events)
		}
	}

	// By digest: stored under the digest; Get finds it by that digest
	// only.
	pinned := reg.Ref("tools@" + digest)
	byDigest, err := Pull(context.Background(), st, pinned, images.PullOptions{Registries: regs})
	if err != nil {
		t.Fatalf("pull by digest: %v", err)
	}
	if byDigest.Name != pinned || byDigest.Digest != digest {
		t.Errorf("pulled %s (%s), want %s", byDigest.Name, byDigest.Digest, pinned)
	}
	if g, err := st.Get(pinned); err != nil || g.Rootfs != byDigest.Rootfs {
		t.Errorf("Get(%s) = %v, %v; want the pinned image", pinned, g, err)
	}
	other := reg.Ref("tools@sha256:" + strings.Repeat("0", 64))
	if _, err := st.Get(other); !errors.Is(err, images.ErrNotFound) {
		t.Errorf("Get(%s) = %v, want ErrNotFound", other, err)
	}
	imgs, err := st.List()
	if err != nil || len(imgs) != 2 {
		t.Fatalf("List = %v, %v; want the tag and the digest", imgs, err)
	}
	// A tag-pulled image answers for its digest when no digest pull is
	// stored.
	if err := st.Remove(pinned); err != nil {
		t.Fatalf("Remove(%s): %v", pinned, err)
	}
	if g, err := st.Get(pinned); err != nil || g.Name != reg.Ref("tools:1") {
		t.Errorf("Get(%s) after removing the digest pull = %v, %v; want the tag's image of that digest", pinned, g, err)
	}
}

func TestPullWrongDigestRefused(t *testing.T) {
	reg := fixtures.StartRegistry(t)
	digest := reg.Push(t, reg.Ref("tools:1"), fixtures.TestImage(t, map[string]string{"a": "1"}))
	st, _ := images.OpenStore(t.TempDir())
	regs := insecureRegs(t, reg, "")
	wrong := "sha256:" + strings.Repeat("ab", 32)
	_, err := Pull(context.Background(), st, reg.Ref("tools@"+wrong), images.PullOptions{Registries: regs})
	if !errors.Is(err, images.ErrNotFound) || !strings.Contains(err.Error(), wrong) {
		t.Errorf("pull of a digest the registry lacks: %v, want images.ErrNotFound naming it", err)
	}
	assertNothingStored(t, st)
	// The same repository by its real digest works.
	if _, err := Pull(context.Background(), st, reg.Ref("tools@"+digest), images.PullOptions{Registries: regs}); err != nil {
		t.Errorf("pull by the right digest: %v", err)
	}
}

func TestPullTamperedLayerRefused(t *testing.T) {
	reg := fixtures.StartRegistry(t)
	img := fixtures.TestImage(t, map[string]string{"payload": strings.Repeat("data ", 1000)})
	reg.Push(t, reg.Ref("tools:1"), img)
	good := fixtures.TestImage(t, map[string]string{"payload": "good"})
	reg.Push(t, reg.Ref("good:1"), good)
	reg.Tamper(fixtures.LayerDigest(t, img))
	st, _ := images.OpenStore(t.TempDir())
	regs := insecureRegs(t, reg, "")
	_, err := Pull(context.Background(), st, reg.Ref("tools:1"), images.PullOptions{Registries: regs})
	if !errors.Is(err, images.ErrVerify) || !strings.Contains(err.Error(), reg.Ref("tools:1")) {
		t.Fatalf("pull of a tampered layer: %v, want images.ErrVerify naming the reference", err)
	}
	assertNothingStored(t, st)
	if _, err := Pull(context.Background(), st, reg.Ref("good:1"), images.PullOptions{Registries: regs}); err != nil {
		t.Errorf("pull of an untampered image from the same registry: %v", err)
	}
}

func TestPullSizeCapFailsFast(t *testing.T) {
	reg := fixtures.StartRegistry(t)
	img := fixtures.TestImage(t, map[string]string{"payload": strings.Repeat("x", 4096)})
	reg.Push(t, reg.Ref("tools:1"), img)
	// A manifest declaring a 1 GiB layer the registry does not even
	// have: the cap refuses it before anything is fetched.
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	big := m.DeepCopy()
	big.Layers[0].Size = 1 << 30
	big.Layers[0].Digest.Hex = strings.Repeat("1", 64)
	body, _ := json.Marshal(big)
	req, _ := http.NewRequest(http.MethodPut, "http://"+reg.Host+"/v2/huge/manifests/1", bytes.NewReader(body))
	req.Header.Set("Content-Type", string(big.MediaType))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("put manifest: %v %v", err, resp)
	}
	resp.Body.Close()

	st, _ := images.OpenStore(t.TempDir())
	regs := insecureRegs(t, reg, "")
	before := reg.BlobGets()
	_, err = Pull(context.Background(), st, reg.Ref("huge:1"), images.PullOptions{Registries: regs, MaxBytes: 512 << 20})
	if !errors.Is(err, images.ErrVerify) || !strings.Contains(err.Error(), "cap") {
		t.Fatalf("pull of a 1 GiB layer over a 512 MiB cap: %v, want images.ErrVerify naming the cap", err)
	}
	if n := reg.BlobGets() - before; n != 0 {
		t.Errorf("the refused pull fetched %d blobs, want none", n)
	}
	assertNothingStored(t, st)
	// The small image fits a small cap.
	if _, err := Pull(context.Background(), st, reg.Ref("tools:1"), images.PullOptions{Registries: regs, MaxBytes: 64 << 10}); err != nil {
		t.Errorf("pull under the cap: %v", err)
	}
}

func TestPullPlainHTTPOnlyWhenListed(t *testing.T) {
	reg := fixtures.StartRegistry(t)
	reg.Push(t, reg.Ref("tools:1"), fixtures.TestImage(t, map[string]string{"a": "1"}))
	st, _ := images.OpenStore(t.TempDir())
	unlisted, err := images.LoadRegistries("", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := reg.BlobGets()
	if _, err := Pull(context.Background(), st, reg.Ref("tools:1"), images.PullOptions{Registries: unlisted}); err == nil {
		t.Fatal("pull from a plain-HTTP loopback registry not listed as insecure succeeded")
	}
	if _, err := Pull(context.Background(), st, reg.Ref("tools:1"), images.PullOptions{}); err == nil {
		t.Fatal("pull without registries config from a plain-HTTP registry succeeded")
	}
	if n := reg.BlobGets() - before; n != 0 {
		t.Errorf("refused pulls fetched %d blobs over plain HTTP", n)
	}
	assertNothingStored(t, st)
	if _, err := Pull(context.Background(), st, reg.Ref("tools:1"), images.PullOptions{Registries: insecureRegs(t, reg, "")}); err != nil {
		t.Errorf("pull from the listed registry: %v", err)
	}
}

func TestPullCredentialsFromConfig(t *testing.T) {
	reg := fixtures.StartRegistry(t)
	reg.Push(t, reg.Ref("private:1"), fixtures.TestImage(t, map[string]string{"a": "1"}))
	reg.RequireAuth("ci", "s3cret-pass")
	st, _ := images.OpenStore(t.TempDir())
	_, err := Pull(context.Background(), st, reg.Ref("private:1"), images.PullOptions{Registries: insecureRegs(t, reg, "")})
	if err == nil || !strings.Contains(err.Error(), "refused access") {
		t.Fatalf("anonymous pull of a private image: %v, want refused access", err)
	}
	dir := t.TempDir()
	wrong := insecureRegs(t, reg, reg.AuthConfig(t, dir, "ci", "wrong"))
	if _, err := Pull(context.Background(), st, reg.Ref("private:1"), images.PullOptions{Registries: wrong}); err == nil {
		t.Fatal("pull with wrong credentials succeeded")
	} else if strings.Contains(err.Error(), "wrong") {
		t.Errorf("error quotes the password: %v", err)
	}
	assertNothingStored(t, st)
	right := insecureRegs(t, reg, reg.AuthConfig(t, dir, "ci", "s3cret-pass"))
	if got := right.Registries(); !slices.Equal(got, []string{reg.Host}) {
		t.Errorf("images.Registries() = %v", got)
	}
	if _, err := Pull(context.Background(), st, reg.Ref("private:1"), images.PullOptions{Registries: right}); err != nil {
		t.Errorf("pull with the operator's credentials: %v", err)
	}
}

func TestPullSignatures(t *testing.T) {
	reg := fixtures.StartRegistry(t)
	dir := t.TempDir()
	signer := fixtures.NewSigner(t, dir, "signer")
	stranger := fixtures.NewSigner(t, dir, "stranger")
	key, err := images.LoadPublicKey(signer.PublicKeyFile)
	if err != nil {
		t.Fatal(err)
	}
	regs := insecureRegs(t, reg, "")
	repo := reg.Ref("tools")

	signed := reg.PushSigned(t, signer, repo, "signed", fixtures.TestImage(t, map[string]string{"a": "signed"}))
	reg.PushSigned(t, nil, repo, "unsigned", fixtures.TestImage(t, map[string]string{"a": "unsigned"}))
	reg.PushSigned(t, stranger, repo, "stranger", fixtures.TestImage(t, map[string]string{"a": "stranger"}))
	// A valid signature of another image, stored for this one.
	moved := reg.Push(t, repo+":moved", fixtures.TestImage(t, map[string]string{"a": "moved"}))
	reg.Sign(t, signer, repo, moved, signed)
	garbage := reg.Push(t, repo+":garbage", fixtures.TestImage(t, map[string]string{"a": "garbage"}))
	reg.PushSignature(t, repo, garbage, []byte(`{}`), "bm90IGEgc2lnbmF0dXJl")

	for _, tc := range []struct{ tag, want string }{
		{"unsigned", "is not signed"},
		{"stranger", "does not verify"},
		{"moved", "signs \"" + signed + "\""},
		{"garbage", "does not verify"},
	} {
		st, _ := images.OpenStore(t.TempDir())
		before := reg.BlobGets()
		_, err := Pull(context.Background(), st, repo+":"+tc.tag, images.PullOptions{Registries: regs, Keys: []images.PublicKey{key}})
		if !errors.Is(err, images.ErrVerify) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), repo) {
			t.Errorf("%s: %v, want images.ErrVerify naming %s and %q", tc.tag, err, repo, tc.want)
		}
		// Only the signature's payload may have been read.
		if n := reg.BlobGets() - before; n > 2 {
			t.Errorf("%s: the refused pull fetched %d blobs; layers must not be fetched before verification", tc.tag, n)
		}
		assertNothingStored(t, st)
	}

	st, _ := images.OpenStore(t.TempDir())
	var verified []images.PullEvent
	img, err := Pull(context.Background(), st, repo+":signed", images.PullOptions{Registries: regs, Keys: []images.PublicKey{key}, Progress: func(e images.PullEvent) {
		if e.Event == "verified" {
			verified = append(verified, e)
		}
	}})
	if err != nil {
		t.Fatalf("pull of a signed image: %v", err)
	}
	if !slices.Equal(img.Signers, []string{key.Fingerprint}) || len(verified) != 1 || verified[0].Signer != key.Fingerprint {
		t.Errorf("signers %v, events %+v; want %s", img.Signers, verified, key.Fingerprint)
	}
	if again, err := st.Get(repo + ":signed"); err != nil || !slices.Equal(again.Signers, img.Signers) {
		t.Errorf("the stored record lost the signers: %v, %v", again, err)
	}
}

// TestPullConcurrent: pulls of one reference and of another at the same
// time all succeed and leave one image each.
func TestPullConcurrent(t *testing.T) {
	reg := fixtures.StartRegistry(t)
	a := reg.Push(t, reg.Ref("a:1"), fixtures.TestImage(t, map[string]string{"f": "a"}))
	b := reg.Push(t, reg.Ref("b:1"), fixtures.TestImage(t, map[string]string{"f": "b"}))
	st, _ := images.OpenStore(t.TempDir())
	regs := insecureRegs(t, reg, "")
	refs := []string{reg.Ref("a:1"), reg.Ref("a:1"), reg.Ref("b:1"), reg.Ref("a:1"), reg.Ref("b:1")}
	errs := make(chan error, len(refs))
	for _, r := range refs {
		go func() {
			_, err := Pull(context.Background(), st, r, images.PullOptions{Registries: regs})
			errs <- err
		}()
	}
	for range refs {
		if err := <-errs; err != nil {
			t.Errorf("concurrent pull: %v", err)
		}
	}
	imgs, err := st.List()
	if err != nil || len(imgs) != 2 || imgs[0].Digest != a || imgs[1].Digest != b {
		t.Errorf("List after concurrent pulls = %v, %v", imgs, err)
	}
	left, _ := os.ReadDir(filepath.Join(st.Root(), tmpDir))
	for _, e := range left {
		if strings.HasPrefix(e.Name(), "pull-") {
			t.Errorf("staging leftover %s", e.Name())
		}
	}
}

// TestPullRefusesMoreBytesThanDeclared: a manifest that understates a
// layer's size does not get past the cap: reading stops at the declared
// size and the pull is refused.
func TestPullRefusesMoreBytesThanDeclared(t *testing.T) {
	reg := fixtures.StartRegistry(t)
	img := fixtures.TestImage(t, map[string]string{"payload": strings.Repeat("z", 64<<10)})
	reg.Push(t, reg.Ref("real:1"), img)
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	lie := m.DeepCopy()
	lie.Layers[0].Size = 10
	body, _ := json.Marshal(lie)
	req, _ := http.NewRequest(http.MethodPut, "http://"+reg.Host+"/v2/real/manifests/lie", bytes.NewReader(body))
	req.Header.Set("Content-Type", string(lie.MediaType))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode/100 != 2 {
		t.Fatalf("put manifest: %v %v", err, resp)
	}
	resp.Body.Close()
	st, _ := images.OpenStore(t.TempDir())
	_, err = Pull(context.Background(), st, reg.Ref("real:lie"), images.PullOptions{Registries: insecureRegs(t, reg, "")})
	if !errors.Is(err, images.ErrVerify) {
		t.Fatalf("pull of a manifest understating its layer: %v, want ErrVerify", err)
	}
	assertNothingStored(t, st)
	if _, err := Pull(context.Background(), st, reg.Ref("real:1"), images.PullOptions{Registries: insecureRegs(t, reg, "")}); err != nil {
		t.Errorf("pull of the honest manifest: %v", err)
	}
}

// BenchmarkPull pulls a one-layer image of 8 MiB of files from the
// loopback registry; BenchmarkPullBaselineImport imports the same root
// filesystem from a tarball, the baseline measured in the same run.
func BenchmarkPull(b *testing.B) {
	reg := fixtures.StartRegistry(b)
	files := benchFiles()
	reg.Push(b, reg.Ref("bench:1"), fixtures.TestImage(b, files))
	regs, err := images.LoadRegistries("", []string{reg.Host})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		st, _ := images.OpenStore(b.TempDir())
		if _, err := Pull(context.Background(), st, reg.Ref("bench:1"), images.PullOptions{Registries: regs}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkPullBaselineImport(b *testing.B) {
	files := benchFiles()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range files {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg})
		tw.Write([]byte(body))
	}
	tw.Close()
	file := filepath.Join(b.TempDir(), "rootfs.tar")
	os.WriteFile(file, buf.Bytes(), 0o600)
	for b.Loop() {
		st, _ := images.OpenStore(b.TempDir())
		if _, err := st.Import(context.Background(), file, "bench:1", nil); err != nil {
			b.Fatal(err)
		}
	}
}

// benchFiles are 64 files of 128 KiB of pseudo-random text.
func benchFiles() map[string]string {
	files := map[string]string{}
	x := uint32(1)
	for i := range 64 {
		var sb strings.Builder
		for sb.Len() < 128<<10 {
			x ^= x << 13
			x ^= x >> 17
			x ^= x << 5
			fmt.Fprintf(&sb, "%08x", x)
		}
		files[fmt.Sprintf("f%02d", i)] = sb.String()
	}
	return files
}
