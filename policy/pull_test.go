package policy

import (
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestPullAndVerifyFields(t *testing.T) {
	dir := t.TempDir()
	key := fixtures.NewSigner(t, dir, "release").PublicKeyFile
	d := "sha256:" + strings.Repeat("c", 64)
	doc := "name: pinned\nimage: 127.0.0.1:5000/tools@" + d + "\npull: always\nverify: {keys: [" + key + "]}\n"
	p, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if p.Pull != sandbox.PullAlways || len(p.VerifyKeys) != 1 || p.VerifyKeys[0] != key {
		t.Fatalf("parsed pull %q, keys %v", p.Pull, p.VerifyKeys)
	}
	// Format round-trips the new fields, digest included.
	out, err := Format(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(out)
	if err != nil || back.Digest != p.Digest || back.Pull != p.Pull || len(back.VerifyKeys) != 1 {
		t.Errorf("round trip: %+v, %v", back, err)
	}
	// policy check names the requirement and the key's fingerprint.
	pk, err := images.LoadPublicKey(key)
	if err != nil {
		t.Fatal(err)
	}
	got := Explain(p)
	for _, want := range []string{"pull always", "pinned", "image signature: required", key, pk.Fingerprint, "refused before anything runs"} {
		if !strings.Contains(got, want) {
			t.Errorf("Explain lacks %q:\n%s", want, got)
		}
	}
	// The default is missing, and an absent pull key leaves the digest
	// of existing policies alone.
	def, err := Parse([]byte("name: d\nimage: tools:1\n"))
	if err != nil || def.Pull.Or() != sandbox.PullMissing || def.Pull != "" {
		t.Errorf("default pull: %q (%v)", def.Pull, err)
	}
	if !strings.Contains(Explain(def), "pull missing (the default)") || !strings.Contains(Explain(def), "not required") {
		t.Errorf("Explain of the default:\n%s", Explain(def))
	}
}

func TestPullAndVerifyRefused(t *testing.T) {
	for doc, want := range map[string]string{
		"image: x:1\npull: sometimes\n":                          "pull",
		"image: x:1\nverify: {keys: []}\n":                       "verify.keys",
		"image: x:1\nverify: {}\n":                               "verify.keys",
		"image: x:1\nverify: {keys: [rel.pub]}\n":                "verify.keys[0]",
		"image: x:1\nverify: {keys: [/a/../b]}\n":                "verify.keys[0]",
		"image: host\nverify: {keys: [/k.pub]}\n":                "carries no signature",
		"backend: local\nimage: x:1\nverify: {keys: [/k.pub]}\n": "backend local",
		"image: x:1\nverify: {keys: [/k.pub], key: /x}\n":        "key",
	} {
		_, err := Parse([]byte("name: bad\n" + doc))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error naming %q", doc, err, want)
		}
	}
	// The legitimate variant parses.
	if _, err := Parse([]byte("name: ok\nimage: x:1\npull: never\nverify: {keys: [/k.pub]}\n")); err != nil {
		t.Errorf("valid pull and verify: %v", err)
	}
}
