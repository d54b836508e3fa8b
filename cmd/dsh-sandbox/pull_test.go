package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/images/registry"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/console"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/oci"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
)

// pullEvents decodes the JSON lines images pull --json wrote.
func pullEvents(t *testing.T, out string) []map[string]any {
	t.Helper()
	var evs []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("images pull --json line %q: %v", l, err)
		}
		evs = append(evs, m)
	}
	return evs
}

func TestImagesPullCommand(t *testing.T) {
	reg := fixtures.StartRegistry(t)
	img := fixtures.TestImage(t, map[string]string{"etc/": "", "etc/motd": "hi\n"}, "PATH=/bin")
	digest := reg.Push(t, reg.Ref("tools:1"), img)
	data := t.TempDir()
	base := []string{"--data-dir", data, "--insecure-registries", reg.Host}

	stdout, stderr, code := run(t, append([]string{"images", "pull", "--json"}, append(base, reg.Ref("tools:1"))...)...)
	if code != 0 {
		t.Fatalf("images pull exited %d: %s", code, stderr)
	}
	evs := pullEvents(t, stdout)
	var kinds []string
	for _, e := range evs {
		kinds = append(kinds, e["event"].(string))
	}
	last := evs[len(evs)-1]
	image, _ := last["image"].(map[string]any)
	if !slices.Contains(kinds, "resolved") || !slices.Contains(kinds, "layer") || last["event"] != "pulled" || image["digest"] != digest || image["source"] != reg.Ref("tools:1") {
		t.Errorf("images pull --json events %v, last %v; want resolved, layer, pulled with digest %s", kinds, last, digest)
	}

	// By digest, then list shows both with digest and source.
	if _, stderr, code := run(t, append([]string{"images", "pull"}, append(base, reg.Ref("tools@"+digest))...)...); code != 0 {
		t.Fatalf("images pull by digest exited %d: %s", code, stderr)
	}
	stdout, _, _ = run(t, append([]string{"images", "list"}, base...)...)
	if !strings.Contains(stdout, "SOURCE") || strings.Count(stdout, "  "+digest+"  ") != 2 || !strings.Contains(stdout, reg.Ref("tools:1")) {
		t.Errorf("images list:\n%s\nwant the tag and the digest pull with digest %s and source", stdout, digest)
	}
	if _, stderr, code := run(t, append([]string{"images", "rm"}, append(base, reg.Ref("tools@"+digest))...)...); code != 0 {
		t.Errorf("images rm of the digest pull exited %d: %s", code, stderr)
	}

	// Refusals: each names the reference, and nothing more is stored.
	wrong := "sha256:" + strings.Repeat("e", 64)
	reg.Tamper(fixtures.LayerDigest(t, img))
	reg.Push(t, reg.Ref("tampered:1"), img)
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{reg.Ref("tools@" + wrong)}, 125, wrong},
		{[]string{reg.Ref("tampered:1")}, 2, "tampered"},
		{[]string{"--verify-key", fixtures.NewSigner(t, t.TempDir(), "k").PublicKeyFile, reg.Ref("tools:1")}, 2, "is not signed"},
		{[]string{"--verify-key", "/nonexistent.pub", reg.Ref("tools:1")}, 2, "--verify-key[0]"},
		{[]string{"--registry-auth", filepath.Join(data, "missing.json"), reg.Ref("tools:1")}, 2, "--registry-auth"},
		{[]string{"--max-pull-bytes", "100", reg.Ref("tampered:1")}, 2, "cap"},
		{[]string{"tools:1@sha256:abc"}, 2, "REF"},
	} {
		_, stderr, code := run(t, append(append([]string{"images", "pull"}, base...), tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("images pull %v exited %d (%s), want %d naming %q", tc.args, code, stderr, tc.code, tc.want)
		}
	}
	stdout, _, _ = run(t, append([]string{"images", "list", "--json"}, base...)...)
	var listed []images.Image
	if err := json.Unmarshal([]byte(stdout), &listed); err != nil || len(listed) != 2 { // host and tools:1
		t.Errorf("images list --json after refusals = %s (%v), want host and tools:1 only", stdout, err)
	}
}

// TestImagesPullProgressOnTerminal: images pull draws the resolved
// digest and a bar per layer (index, digest, size) on a terminal, and
// nothing when stderr is not one.
func TestImagesPullProgressOnTerminal(t *testing.T) {
	reg := fixtures.StartRegistry(t)
	img := fixtures.TestImage(t, map[string]string{"payload": strings.Repeat("x", 64<<10)})
	digest := reg.Push(t, reg.Ref("tools:1"), img)
	layer := fixtures.LayerDigest(t, img)
	args := []string{"images", "pull", "--data-dir", t.TempDir(), "--insecure-registries", reg.Host, reg.Ref("tools:1")}

	if _, stderr, code := run(t, args...); code != 0 || stderr != "" {
		t.Fatalf("images pull without a terminal exited %d, stderr %q; want 0 and nothing drawn", code, stderr)
	}
	args[3] = t.TempDir() // a fresh store: the pull fetches again
	pair, err := console.Open(sandbox.WindowSize{}, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	var drawn bytes.Buffer
	done := pair.Relay(nil, &drawn)
	var stdout bytes.Buffer
	app := newApp(&stdout, pair.Slave)
	app.Reader = bytes.NewReader(nil)
	err = app.Run(flagsFirst(app, append([]string{"dsh-sandbox"}, args...)))
	pair.CloseSlave()
	<-done
	if err != nil {
		t.Fatalf("images pull on a terminal: %v", err)
	}
	size, err := layerSize(img)
	if err != nil {
		t.Fatal(err)
	}
	out := drawn.String()
	for _, want := range []string{
		reg.Ref("tools:1") + ": " + digest,
		fmt.Sprintf("layer 1/1 %.19s (%d bytes): [", layer, size),
		"] 100%",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the terminal shows %q, want %q in it", out, want)
		}
	}
}

// layerSize is the compressed size of img's one layer.
func layerSize(img v1.Image) (int64, error) {
	ls, err := img.Layers()
	if err != nil || len(ls) != 1 {
		return 0, fmt.Errorf("layers: %d, %v", len(ls), err)
	}
	return ls[0].Size()
}

// TestPullingExecutorRefusesBeforeRunning runs calls through the executor
// that exec, mcp and serve use on the oci backend, with an executor
// underneath that records whether anything ran.
func TestPullingExecutorRefusesBeforeRunning(t *testing.T) {
	reg := fixtures.StartRegistry(t)
	dir := t.TempDir()
	signer := fixtures.NewSigner(t, dir, "release")
	stranger := fixtures.NewSigner(t, dir, "stranger")
	repo := reg.Ref("tools")
	signed := reg.PushSigned(t, signer, repo, "signed", fixtures.TestImage(t, map[string]string{"a": "1"}))
	reg.PushSigned(t, nil, repo, "unsigned", fixtures.TestImage(t, map[string]string{"a": "2"}))
	reg.PushSigned(t, stranger, repo, "badsig", fixtures.TestImage(t, map[string]string{"a": "3"}))

	st, err := images.OpenStore(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	rec := &recordingExecutor{}
	ps := &pullSettings{insecure: []string{reg.Host}, maxBytes: images.DefaultMaxPullBytes}
	ex := newPulling(rec, st, ps, func(string, *images.Image) {})
	call := func(image string, pull sandbox.PullMode, keys ...string) (*sandbox.Result, error) {
		p, _ := policy.Builtin(policy.WorkspaceWrite)
		p.Image, p.Pull, p.VerifyKeys = image, pull, keys
		return ex.Run(context.Background(), &sandbox.Request{Command: "true", Policy: p})
	}
	for _, tc := range []struct {
		name, image string
		pull        sandbox.PullMode
		keys        []string
		want        string
	}{
		{"unsigned", repo + ":unsigned", "", []string{signer.PublicKeyFile}, "is not signed"},
		{"invalid signature", repo + ":badsig", "", []string{signer.PublicKeyFile}, "does not verify"},
		{"wrong digest", repo + "@sha256:" + strings.Repeat("d", 64), "", nil, "no such image"},
		{"never and missing", repo + ":signed", sandbox.PullNever, nil, "policy.pull is never"},
		{"missing key file", repo + ":signed", "", []string{filepath.Join(dir, "nope.pub")}, "policy.verify.keys[0]"},
	} {
		_, err := call(tc.image, tc.pull, tc.keys...)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.image) && tc.name != "missing key file" {
			t.Errorf("%s: %v, want a refusal naming %s and %q", tc.name, err, tc.image, tc.want)
		}
		if rec.runs != 0 {
			t.Fatalf("%s: the backend ran %d calls after a refusal", tc.name, rec.runs)
		}
	}

	// The signed image runs, pinned to its digest; the result names the
	// policy's image and the digest.
	res, err := call(repo+":signed", "", signer.PublicKeyFile)
	if err != nil || rec.runs != 1 {
		t.Fatalf("signed image: %v (runs %d)", err, rec.runs)
	}
	if rec.last != repo+"@"+signed || res.Sandbox.Image != repo+":signed" || res.Sandbox.ImageDigest != signed {
		t.Errorf("ran %q, result image %q digest %q; want the digest %s run and the policy's name reported", rec.last, res.Sandbox.Image, res.Sandbox.ImageDigest, signed)
	}
	// Present and verified: pull never runs it without the registry.
	reg.RequireAuth("nobody", "knows")
	if _, err := call(repo+":signed", sandbox.PullNever, signer.PublicKeyFile); err != nil || rec.runs != 2 {
		t.Errorf("pull never of the verified stored image: %v (runs %d)", err, rec.runs)
	}
	// Stored but verified by another key: never pulls, so it is refused.
	other := fixtures.NewSigner(t, dir, "other")
	if _, err := call(repo+":signed", sandbox.PullNever, other.PublicKeyFile); err == nil || !strings.Contains(err.Error(), "no signature verified") || rec.runs != 2 {
		t.Errorf("pull never with a key that did not verify the stored image: %v (runs %d)", err, rec.runs)
	}
}

// recordingExecutor counts calls and remembers the image of the last.
type recordingExecutor struct {
	runs int
	last string
}

func (r *recordingExecutor) Run(_ context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	r.runs++
	r.last = req.Policy.Image
	code := 0
	// Like the oci backend, it names the digest of a digest reference;
	// like the daemon backends, nothing for an image named by tag.
	var digest string
	if i := strings.LastIndexByte(req.Policy.Image, '@'); i >= 0 {
		digest = req.Policy.Image[i+1:]
	}
	return &sandbox.Result{ExitCode: &code, Sandbox: sandbox.Info{Backend: "oci", Image: req.Policy.Image, ImageDigest: digest}}, nil
}

// TestConformancePulledImage runs the sandboxtest suite on the oci
// backend (runc) with an image pulled from a registry on loopback, signed
// and verified, through the executor exec, mcp and serve use.
func TestConformancePulledImage(t *testing.T) {
	hooksNeedSandbox(t)
	var tarball bytes.Buffer
	if err := images.BusyboxWith(&tarball, "bash"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but the busybox test image cannot be built: %v", err)
		}
		t.Skipf("cannot build the busybox test image (install busybox-static and bash): %v", err)
	}
	reg := fixtures.StartRegistry(t)
	env := []string{"PATH=" + images.DefaultPath}
	ref := reg.Ref("conformance:1")
	digest := reg.Push(t, ref, fixtures.ImageFromTar(t, tarball.Bytes(), env...))
	keyDir := t.TempDir()
	signer := fixtures.NewSigner(t, keyDir, "release")
	reg.Sign(t, signer, reg.Ref("conformance"), digest, digest)

	stateDir := t.TempDir()
	for _, p := range []string{filepath.Dir(stateDir), stateDir} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	st, err := images.OpenStore(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := policy.Builtin(policy.WorkspaceWrite)
	p.Image, p.VerifyKeys = ref, []string{signer.PublicKeyFile}
	var inner *oci.Executor
	sandboxtest.Run(t, sandboxtest.Subject{
		New: func(t *testing.T) sandbox.Executor {
			var err error
			inner, err = oci.New(oci.Options{Runtime: oci.RuntimeRunc, Service: driver.Service{StateDir: stateDir, Detector: calls.Detector{}}, Images: st})
			if err != nil {
				t.Fatalf("oci.New = %v", err)
			}
			return newPulling(inner, st, &pullSettings{insecure: []string{reg.Host}, maxBytes: images.DefaultMaxPullBytes}, func(string, *images.Image) {})
		},
		Policy:   p,
		ImageEnv: env,
		Isolated: true,
	})
	got, err := st.Get(ref)
	if err != nil || got.Digest != digest || !slices.Contains(got.Signers, mustFingerprint(t, signer.PublicKeyFile)) {
		t.Errorf("stored %v (%v), want the pulled, verified image %s", got, err, digest)
	}
}

func mustFingerprint(t *testing.T, file string) string {
	t.Helper()
	k, err := images.LoadPublicKey(file)
	if err != nil {
		t.Fatal(err)
	}
	return k.Fingerprint
}

// TestReapRemovesDeadPullStaging: reap --backend oci removes what a
// killed pull left in the image store, and nothing else of the store.
func TestReapRemovesDeadPullStaging(t *testing.T) {
	hooksNeedSandbox(t)
	data := t.TempDir()
	state := t.TempDir()
	for _, p := range []string{filepath.Dir(state), state} {
		if err := os.Chmod(p, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	st, err := images.OpenStore(filepath.Join(data, "images"))
	if err != nil {
		t.Fatal(err)
	}
	reg := fixtures.StartRegistry(t)
	reg.Push(t, reg.Ref("kept:1"), fixtures.TestImage(t, map[string]string{"a": "1"}))
	if _, err := registry.Pull(context.Background(), st, reg.Ref("kept:1"), images.PullOptions{Registries: mustRegistries(t, reg.Host)}); err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(data, "images", ".tmp", "pull-killed")
	if err := os.MkdirAll(filepath.Join(dead, "image", "rootfs"), 0o700); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := run(t, "reap", "--backend", "oci", "--json", "--data-dir", data, "--state-dir", state)
	if code != 0 || !strings.Contains(stdout, dead) {
		t.Errorf("reap exited %d (%s): %s; want %s removed", code, stderr, stdout, dead)
	}
	if _, err := os.Stat(dead); err == nil {
		t.Error("the dead pull's staging directory is still there")
	}
	if _, err := st.Get(reg.Ref("kept:1")); err != nil {
		t.Errorf("reap removed a stored image: %v", err)
	}
}

func mustRegistries(t *testing.T, insecure ...string) *images.Registries {
	t.Helper()
	r, err := images.LoadRegistries("", insecure)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fakePuller is a daemon's image store for the logic of the pulling
// executor on daemon backends: it has the imported image "bb2:latest"
// and pulls any reference as digest sha256:aa….
type fakePuller struct {
	pulls int
	keys  int
}

const fakeDigest = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func (f *fakePuller) PullImage(_ context.Context, ref string, o images.PullOptions) (*images.Image, error) {
	f.pulls++
	f.keys = len(o.Keys)
	return &images.Image{Name: ref, Digest: fakeDigest, Source: ref}, nil
}

func (f *fakePuller) PulledImage(_ context.Context, ref string) (*images.Image, error) {
	if ref == "bb2:latest" {
		return &images.Image{Name: ref, Digest: "sha256:" + strings.Repeat("b", 64)}, nil
	}
	return nil, images.ErrNotFound
}

// TestDaemonPulling: on a daemon backend an imported image runs by its
// name without a pull, a missing one is pulled and runs by digest, and
// pull never refuses a missing one before anything runs; the result
// names the digest either way.
func TestDaemonPulling(t *testing.T) {
	rec := &recordingExecutor{}
	fp := &fakePuller{}
	ex := newDaemonPulling(rec, fp, &pullSettings{maxBytes: images.DefaultMaxPullBytes}, func(string, *images.Image) {})
	call := func(image string, pull sandbox.PullMode) (*sandbox.Result, error) {
		p, _ := policy.Builtin(policy.WorkspaceWrite)
		p.Image, p.Pull = image, pull
		return ex.Run(context.Background(), &sandbox.Request{Command: "true", Policy: p})
	}
	if _, err := call("registry.example/tools:1", sandbox.PullNever); err == nil || !strings.Contains(err.Error(), "policy.pull is never") || rec.runs != 0 || fp.pulls != 0 {
		t.Errorf("pull never of a missing image: %v (runs %d, pulls %d); want a refusal before anything", err, rec.runs, fp.pulls)
	}
	res, err := call("bb2", "")
	if err != nil || rec.last != "bb2" || fp.pulls != 0 || res.Sandbox.ImageDigest != "sha256:"+strings.Repeat("b", 64) {
		t.Errorf("imported image: %+v, %v; ran %q with %d pulls; want it run by name, unpulled, with a digest", res, err, rec.last, fp.pulls)
	}
	res, err = call("registry.example/tools:1", "")
	if err != nil || fp.pulls != 1 || rec.last != "registry.example/tools@"+fakeDigest || res.Sandbox.Image != "registry.example/tools:1" || res.Sandbox.ImageDigest != fakeDigest {
		t.Errorf("missing image: %+v, %v; ran %q after %d pulls; want a pull and a run by digest", res, err, rec.last, fp.pulls)
	}
}
