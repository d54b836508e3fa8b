package images

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
)

func TestLoadRegistriesRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, body, want string }{
		{"helper", `{"credsStore":"desktop"}`, "credential helpers"},
		{"helpers", `{"credHelpers":{"x.io":"ecr-login"}}`, "credential helpers"},
		{"not json", `auths: {}`, "not a docker config.json"},
		{"bad auth", `{"auths":{"x.io":{"auth":"bm9jb2xvbg=="}}}`, "not base64 of user:password"},
		{"empty", `{"auths":{"x.io":{}}}`, "holds no credentials"},
		{"bad host", `{"auths":{"bad host":{"auth":"dTpw"}}}`, "not a registry"},
	} {
		file := filepath.Join(dir, tc.name+".json")
		os.WriteFile(file, []byte(tc.body), 0o600)
		_, err := LoadRegistries(file, nil)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrInvalid with %q", tc.name, err, tc.want)
		}
	}
	if _, err := LoadRegistries("", []string{"not a host"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("insecure %q: %v, want ErrInvalid", "not a host", err)
	}
	good := filepath.Join(dir, "good.json")
	os.WriteFile(good, []byte(`{"auths":{"https://index.docker.io/v1/":{"username":"u","password":"p"},"r.example:5000":{"auth":"dTpw"}}}`), 0o600)
	r, err := LoadRegistries(good, []string{"R.example:5000"})
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Registries(); !slices.Equal(got, []string{"index.docker.io", "r.example:5000"}) {
		t.Errorf("Registries() = %v", got)
	}
	if !r.Insecure("r.example:5000") || r.Insecure("index.docker.io") {
		t.Error("Insecure does not follow the list")
	}
}

func TestLoadPublicKeyRefusesNonKeys(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "k.pub")
	os.WriteFile(file, []byte("-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"), 0o644)
	if _, err := LoadPublicKey(file); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), file) {
		t.Errorf("LoadPublicKey of garbage: %v", err)
	}
	if _, err := LoadPublicKey(filepath.Join(dir, "missing.pub")); !errors.Is(err, ErrInvalid) {
		t.Errorf("LoadPublicKey of a missing file: %v", err)
	}
	k, err := LoadPublicKey(fixtures.NewSigner(t, dir, "ok").PublicKeyFile)
	if err != nil || !strings.HasPrefix(k.Fingerprint, "sha256:") || len(k.Fingerprint) != 71 {
		t.Errorf("LoadPublicKey = %+v, %v", k, err)
	}
}

func TestCanonicalReference(t *testing.T) {
	d := "sha256:" + strings.Repeat("a", 64)
	for in, want := range map[string]string{
		"golang":                        "golang:latest",
		"docker.io/library/golang:1.26": "golang:1.26",
		"golang@" + d:                   "golang@" + d,
		"golang:1.26@" + d:              "golang@" + d,
		"127.0.0.1:5000/x/y@" + d:       "127.0.0.1:5000/x/y@" + d,
	} {
		if got, err := CanonicalReference(in); err != nil || got != want {
			t.Errorf("CanonicalReference(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"x@sha256:abc", "x@md5:" + strings.Repeat("a", 32), "x@" + strings.ToUpper(d), "host@" + d, "x:bad tag@" + d, "@" + d} {
		if _, err := CanonicalReference(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("CanonicalReference(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	// Names (imports) still refuse digests.
	if _, err := CanonicalName("x@" + d); !errors.Is(err, ErrInvalid) {
		t.Errorf("CanonicalName with a digest: %v", err)
	}

}

func TestReapStagingLeavesLiveOnes(t *testing.T) {
	st, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// What a killed pull left: a staging directory nobody holds.
	dead := filepath.Join(st.Root(), tmpDir, "pull-dead")
	if err := os.MkdirAll(filepath.Join(dead, "image", "rootfs", "usr"), 0o755); err != nil {
		t.Fatal(err)
	}
	live, release, err := st.stage("pull-")
	if err != nil {
		t.Fatal(err)
	}
	removed, err := st.ReapStaging()
	if err != nil || !slices.Equal(removed, []string{dead}) {
		t.Errorf("ReapStaging = %v, %v; want only %s", removed, err, dead)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the live pull's staging directory was removed: %v", err)
	}
	release()
	if _, err := os.Stat(live); err == nil {
		t.Error("release left the staging directory")
	}
	if removed, err := st.ReapStaging(); err != nil || len(removed) != 0 {
		t.Errorf("second ReapStaging = %v, %v; want nothing", removed, err)
	}
}

// FuzzCanonicalReference: any input either fails with ErrInvalid or gives
// a canonical reference that is its own canonical form and that a store
// path can be made of.
func FuzzCanonicalReference(f *testing.F) {
	for _, s := range []string{"golang", "golang:1.26@sha256:" + strings.Repeat("a", 64), "127.0.0.1:5000/x/y@sha256:" + strings.Repeat("0", 64), "x@sha256:", "@", "a/../b", "host@sha256:" + strings.Repeat("1", 64)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, ref string) {
		canon, err := CanonicalReference(ref)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("CanonicalReference(%q) = %v, not ErrInvalid", ref, err)
			}
			return
		}
		again, err := CanonicalReference(canon)
		if err != nil || again != canon {
			t.Fatalf("CanonicalReference(%q) = %q, whose canonical form is %q, %v", ref, canon, again, err)
		}
		repo, tag, err := splitName(canon, true)
		if d := repoDir(repo); err != nil || strings.Contains(d+tagDir(tag), "/") || strings.Contains(tagDir(tag), ":") || d == "." || d == ".." {
			t.Fatalf("%q: store path %q/%q, %v", canon, repoDir(repo), tagDir(tag), err)
		}
		if back, ok := dirTag(tagDir(tag)); !ok || back != tag {
			t.Fatalf("%q: tag %q does not round-trip through its directory (%q, %v)", canon, tag, back, ok)
		}
	})
}

// FuzzLoadRegistries: any credentials file either loads or fails with
// ErrInvalid, and an error never quotes the file's content.
func FuzzLoadRegistries(f *testing.F) {
	f.Add([]byte(`{"auths":{"r.example:5000":{"auth":"dTpw"}}}`))
	f.Add([]byte(`{"auths":{"x":{"username":"u","password":"SECRETVALUE"}}}`))
	f.Add([]byte(`{"credsStore":"x"}`))
	f.Add([]byte(`SECRETVALUE`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadRegistries(file, nil)
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Fatalf("LoadRegistries = %v, not ErrInvalid", err)
		}
		if err != nil && bytes.Contains(data, []byte("SECRETVALUE")) && strings.Contains(err.Error(), "SECRETVALUE") {
			t.Fatalf("the error quotes the file: %v", err)
		}
	})
}
