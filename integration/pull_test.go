//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
)

// pullRegistry is a loopback registry holding the busybox test image
// (with bash) as tools:1, signed by signer, plus unsigned, badly signed
// and tampered copies.
type pullRegistry struct {
	*fixtures.Registry
	digest string
	signer *fixtures.Signer
}

func startPullRegistry(t *testing.T) *pullRegistry {
	t.Helper()
	var tarball bytes.Buffer
	if err := images.BusyboxWith(&tarball, "bash"); err != nil {
		t.Fatalf("the busybox test image cannot be built (scripts/setup.sh installs busybox-static): %v", err)
	}
	reg := fixtures.StartRegistry(t)
	keys := t.TempDir()
	p := &pullRegistry{Registry: reg, signer: fixtures.NewSigner(t, keys, "cosign")}
	img := fixtures.ImageFromTar(t, tarball.Bytes(), "PATH="+images.DefaultPath, "FROM_REGISTRY=yes")
	p.digest = reg.Push(t, reg.Ref("tools:1"), img)
	reg.Sign(t, p.signer, reg.Ref("tools"), p.digest, p.digest)
	// The same content under other repositories: unsigned, signed by a
	// stranger, and served tampered.
	reg.Push(t, reg.Ref("unsigned:1"), img)
	reg.Push(t, reg.Ref("badsig:1"), img)
	reg.Sign(t, fixtures.NewSigner(t, keys, "stranger"), reg.Ref("badsig"), p.digest, p.digest)
	other := fixtures.ImageFromTar(t, append(bytes.Clone(tarball.Bytes()), make([]byte, 1024)...), "PATH="+images.DefaultPath)
	reg.Push(t, reg.Ref("tampered:1"), other)
	reg.Tamper(fixtures.LayerDigest(t, other))
	return p
}

// docLines are the dsh-sandbox commands of the first sh block of
// section in docs/images.md.
func docLines(t *testing.T, section string) []string {
	t.Helper()
	data, err := os.ReadFile("../docs/images.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(data), "\n## "+section+"\n")
	if !ok {
		t.Fatalf("docs/images.md has no section %q", section)
	}
	_, rest, ok = strings.Cut(rest, "```sh\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatalf("docs/images.md section %q has no sh block", section)
	}
	var out []string
	sc := bufio.NewScanner(strings.NewReader(block))
	for sc.Scan() {
		if l := sc.Text(); strings.HasPrefix(l, "dsh-sandbox ") {
			out = append(out, l)
		}
	}
	return out
}

// TestImagesPullDocExamples runs the pull examples of docs/images.md as
// written, with the loopback registry's address, the pushed digest and
// the key file put in.
func TestImagesPullDocExamples(t *testing.T) {
	reg := startPullRegistry(t)
	e := newEnv(t)
	lines := docLines(t, "Pulling")
	if len(lines) < 4 {
		t.Fatalf("docs/images.md Pulling block has %d commands", len(lines))
	}
	for _, l := range lines {
		l = strings.NewReplacer("127.0.0.1:5000", reg.Host, "sha256:<digest>", reg.digest, "cosign.pub", reg.signer.PublicKeyFile).Replace(l)
		words := strings.Fields(l)[1:]
		args := append(append(append([]string{}, words[:2]...), e.flags("")...), words[2:]...)
		if strings.Contains(l, "--backend docker") {
			requireDaemons(t)
			args = append(args[:2], append(daemonFlags(), args[2:]...)...)
		}
		r := run(t, nil, args...)
		if r.code != 0 {
			t.Fatalf("%s exited %d: %s", l, r.code, r.stderr)
		}
		switch {
		case strings.Contains(l, " rm --backend docker"):
			if !strings.Contains(r.stdout, "removed "+reg.Ref("tools:1")+" from docker") {
				t.Errorf("%s printed %q", l, r.stdout)
			}
		case strings.Contains(l, " list"):
			if !strings.Contains(r.stdout, reg.digest) || !strings.Contains(r.stdout, reg.Ref("tools:1")) {
				t.Errorf("%s printed\n%s\nwant the pulled images with digest and source", l, r.stdout)
			}
		case strings.Contains(l, "--json"):
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			var last struct {
				Event string
				Image images.Image
			}
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Event != "pulled" || len(last.Image.Signers) != 1 {
				t.Errorf("%s: last line %q (%v), want a pulled event with one signer", l, lines[len(lines)-1], err)
			}
		}
	}
}

// writePolicy writes a policy file for the oci backend into a directory
// of its own and returns its path.
func writePolicy(t *testing.T, body string) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(f, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestPullPolicyOCI runs calls whose policy names a registry image on the
// oci backend: by tag and by digest, from a registry that needs the
// operator's credentials; a wrong digest, a tampered layer, a missing
// and an invalid signature, and missing credentials are each refused with
// a clear error and nothing runs.
func TestPullPolicyOCI(t *testing.T) {
	requireRoot(t)
	testPullPolicy(t, "oci")
}

// TestPullPolicyDaemons is TestPullPolicyOCI on the docker and
// containerd backends, which pull through their daemons; images rm then
// removes the pulled tag and digest.
func TestPullPolicyDaemons(t *testing.T) {
	requireDaemons(t)
	for _, b := range []string{"docker", "containerd"} {
		t.Run(b, func(t *testing.T) { testPullPolicy(t, b) })
	}
}

func testPullPolicy(t *testing.T, backend string) {
	reg := startPullRegistry(t)
	reg.RequireAuth("ci", "pull-secret")
	e := newEnv(t)
	auth := reg.AuthConfig(t, t.TempDir(), "ci", "pull-secret")
	operator := []string{"--insecure-registries", reg.Host, "--registry-auth", auth}
	marker := filepath.Join(e.workspace, "ran")
	touch := "touch '" + marker + "'; echo $FROM_REGISTRY"
	key := reg.signer.PublicKeyFile
	flags := append(e.flags(""), daemonFlags()...)
	exec := func(policyBody string, extra ...string) result {
		args := append(append(append([]string{"exec", "--json", "--policy", writePolicy(t, "backend: "+backend+"\n"+policyBody)}, flags...), extra...), "--", touch)
		return run(t, nil, args...)
	}
	// pulled lists the images of the test registry on the backend.
	pulled := func() []string {
		r := run(t, nil, append([]string{"images", "list", "--json", "--backend", backend}, flags...)...)
		var listed []images.Image
		if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil {
			t.Fatalf("images list --backend %s = %s (%v)", backend, r.stdout, err)
		}
		var out []string
		for _, img := range listed {
			if strings.HasPrefix(img.Name, reg.Host+"/") {
				out = append(out, img.Name+" "+img.Digest+" "+img.Source)
			}
		}
		return out
	}
	wrong := "sha256:" + strings.Repeat("e", 64)
	for _, tc := range []struct {
		name, policy string
		operator     []string
		code         int
		want         []string
	}{
		{"wrong digest", "image: " + reg.Ref("tools@"+wrong), operator, 125, []string{wrong, "no such image"}},
		{"tampered layer", "image: " + reg.Ref("tampered:1"), operator, 2, []string{reg.Ref("tampered:1"), "tampered or corrupt"}},
		{"unsigned", "image: " + reg.Ref("unsigned:1") + "\nverify: {keys: [" + key + "]}", operator, 2, []string{reg.Ref("unsigned"), "is not signed"}},
		{"invalid signature", "image: " + reg.Ref("badsig:1") + "\nverify: {keys: [" + key + "]}", operator, 2, []string{reg.Ref("badsig"), "does not verify"}},
		{"no credentials", "image: " + reg.Ref("tools:1"), []string{"--insecure-registries", reg.Host}, 125, []string{reg.Ref("tools:1"), "refused access"}},
		{"not listed as insecure", "image: " + reg.Ref("tools:1"), []string{"--registry-auth", auth}, 125, []string{"plain HTTP"}},
	} {
		r := exec("name: t\n"+tc.policy+"\n", tc.operator...)
		if r.code != tc.code {
			t.Errorf("%s: exit %d, want %d: %s", tc.name, r.code, tc.code, r.stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("%s: stderr %q does not name %q", tc.name, r.stderr, w)
			}
		}
		if strings.Contains(r.stderr, "pull-secret") {
			t.Errorf("%s: the error shows the password", tc.name)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%s: the call ran after a refusal", tc.name)
		}
	}
	if got := pulled(); len(got) != 0 {
		t.Errorf("images list --backend %s after the refusals = %v; want nothing from the registry", backend, got)
	}

	// By tag with the operator's credentials and a verified signature,
	// then pinned by digest with pull never: both run, and the results
	// name the digest.
	for _, tc := range []struct{ name, policy string }{
		{"tag, verified", "image: " + reg.Ref("tools:1") + "\nverify: {keys: [" + key + "]}"},
		{"digest, pull never", "image: " + reg.Ref("tools@"+reg.digest) + "\npull: never\nverify: {keys: [" + key + "]}"},
		{"digest, always", "image: " + reg.Ref("tools@"+reg.digest) + "\npull: always"},
	} {
		os.Remove(marker)
		r := exec("name: t\n"+tc.policy+"\n", operator...)
		var res struct {
			Stdout  struct{ Text string }
			Sandbox struct{ Image, ImageDigest string }
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); r.code != 0 || err != nil {
			t.Fatalf("%s: exit %d (%v): %s %s", tc.name, r.code, err, r.stdout, r.stderr)
		}
		if res.Stdout.Text != "yes\n" || res.Sandbox.ImageDigest != reg.digest {
			t.Errorf("%s: stdout %q, image %q digest %q; want the registry image's env and digest %s", tc.name, res.Stdout.Text, res.Sandbox.Image, res.Sandbox.ImageDigest, reg.digest)
		}
		if _, err := os.Stat(marker); err != nil {
			t.Errorf("%s: the call did not run: %v", tc.name, err)
		}
	}
	// images list shows the pulled tag and digest with their digest and
	// source; images rm removes both.
	want := []string{reg.Ref("tools:1") + " " + reg.digest + " " + reg.Ref("tools:1"), reg.Ref("tools@"+reg.digest) + " " + reg.digest + " " + reg.Ref("tools@"+reg.digest)}
	if got := pulled(); !slices.Equal(sorted(got), sorted(want)) {
		t.Errorf("images list --backend %s = %v, want %v", backend, got, want)
	}
	for _, n := range []string{reg.Ref("tools:1"), reg.Ref("tools@" + reg.digest)} {
		if r := run(t, nil, append([]string{"images", "rm", "--backend", backend, n}, flags...)...); r.code != 0 {
			t.Errorf("images rm --backend %s %s: exit %d: %s", backend, n, r.code, r.stderr)
		}
	}
	if got := pulled(); len(got) != 0 {
		t.Errorf("images list --backend %s after images rm = %v", backend, got)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// TestPullServeAuditAndRequestCredentials: the service pulls with the
// operator's configuration; a request that names credentials (or an
// image) is refused with 400 naming the field and starts nothing; a
// digest-pinned call's audit record names the digest.
func TestPullServeAuditAndRequestCredentials(t *testing.T) {
	requireRoot(t)
	reg := startPullRegistry(t)
	reg.RequireAuth("ci", "pull-secret")
	e := newEnv(t)
	auth := reg.AuthConfig(t, t.TempDir(), "ci", "pull-secret")
	pol := writePolicy(t, fmt.Sprintf("name: pinned\nimage: %s\nverify: {keys: [%s]}\n", reg.Ref("tools@"+reg.digest), reg.signer.PublicKeyFile))
	sv := startServe(t, e, "--policy-file", pol, "--insecure-registries", reg.Host, "--registry-auth", auth)
	marker := filepath.Join(e.workspace, "ran")
	hc := socketHTTP(t, sv.sock)
	for _, extra := range []struct{ body, field string }{
		{`,"registryAuth":{"username":"ci","password":"pull-secret"}`, "registryAuth"},
		{`,"credentials":{"` + reg.Host + `":"Y2k6cHVsbC1zZWNyZXQ="}`, "credentials"},
		{`,"image":"` + reg.Ref("unsigned:1") + `"`, "image"},
	} {
		body := fmt.Sprintf(`{"policy":"pinned","command":"touch %s"%s}`, marker, extra.body)
		resp, err := hc.Post("http://x/v1/run", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(data), `"field":"`+extra.field+`"`) {
			t.Errorf("request naming %s: %d %s, want 400 naming the field", extra.field, resp.StatusCode, data)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a request naming credentials ran")
	}
	resp, err := sv.cl.Run(context.Background(), types.RunRequest{Session: e.header("s1"), Policy: "pinned", Command: "touch '" + marker + "'"})
	if err != nil || resp.Result.Sandbox.ImageDigest != reg.digest {
		t.Fatalf("Run under the pinned policy = %+v, %v; want a result naming %s", resp, err, reg.digest)
	}
	sv.stop(t)
	data, err := os.ReadFile(sv.audit)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	var rec struct{ Image, ImageDigest, Error string }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rec); err != nil || rec.ImageDigest != reg.digest || rec.Error != "" {
		t.Errorf("audit record %s (%v), want imageDigest %s", lines[len(lines)-1], err, reg.digest)
	}
}
