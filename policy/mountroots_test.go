package policy

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

const rootsYAML = `
mountRoots:
  - {path: /srv/ref, mode: ro}
  - {path: /srv/data, mode: rw}
`

func TestParseMountRoots(t *testing.T) {
	p, err := Parse([]byte(rootsYAML))
	if err != nil {
		t.Fatalf("Parse(rootsYAML) error = %v", err)
	}
	want := []sandbox.MountRoot{{Path: "/srv/data"}, {Path: "/srv/ref", ReadOnly: true}}
	if !reflect.DeepEqual(p.MountRoots, want) {
		t.Errorf("Parse(rootsYAML).MountRoots = %+v, want %+v (sorted)", p.MountRoots, want)
	}
	out, err := Format(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(out)
	if err != nil || !reflect.DeepEqual(back, p) {
		t.Errorf("Parse(Format(p)) = %+v, %v; want %+v\n%s", back, err, p, out)
	}
	none, _ := Parse([]byte("{}"))
	if none.Digest == p.Digest {
		t.Errorf("mountRoots do not change the digest")
	}
	text := Explain(p)
	for _, w := range []string{"read-only bind mounts of what lies below the host's /srv/ref", "read-only or read-write bind mounts of what lies below the host's /srv/data"} {
		if !strings.Contains(text, w) {
			t.Errorf("Explain does not say %q:\n%s", w, text)
		}
	}
}

func TestParseMountRootsInvalidCase(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"mountRoots: [{path: /srv/data}]", "mountRoots[0].mode: is missing"},
		{"mountRoots: [{path: /srv/data, mode: rx}]", `mountRoots[0].mode: "rx" is not allowed`},
		{"mountRoots: [{path: /srv/data, mode: ro, writable: true}]", "mountRoots[0].writable: unknown field"},
		{"mountRoots: [{mode: ro}]", "mountRoots[0].path: is missing or empty"},
		{"mountRoots: [{path: srv, mode: ro}]", `mountRoots[0].path: "srv" is not an absolute path`},
		{"mountRoots: [{path: /srv/../etc, mode: ro}]", "mountRoots[0].path: \"/srv/../etc\" is not a clean path"},
		{"mountRoots: [{path: /, mode: ro}]", "mountRoots[0].path: \"/\" is a system directory"},
		{"mountRoots: [{path: /etc/ssl, mode: ro}]", "mountRoots[0].path: \"/etc/ssl\" is a system directory"},
		{"mountRoots: [{path: /home, mode: ro}]", "mountRoots[0].path: \"/home\" is a system directory"},
		{"mountRoots: [{path: /proc/self, mode: ro}]", "mountRoots[0].path: \"/proc/self\" is a system directory"},
		{"mountRoots: [{path: /srv/a, mode: ro}, {path: /srv/a, mode: rw}]", "mountRoots[1].path: \"/srv/a\" is listed twice"},
		{"mountRoots: /srv", "mountRoots: is a string; want a list"},
	} {
		_, err := Parse([]byte(tc.in))
		if err == nil || !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v; want an invalid-argument error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestNarrowMountsCase(t *testing.T) {
	p, err := Parse([]byte(rootsYAML + "mounts: [{source: /srv/ref/fixed, target: /fixed, mode: ro}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	mount := func(src, dst string, ro bool) Narrowing {
		return Narrowing{Mounts: []sandbox.Mount{{Source: src, Target: dst, ReadOnly: ro}}}
	}
	for _, tc := range []struct {
		name string
		n    Narrowing
		want string // substring of the refusal; "" means allowed
	}{
		{"ro below a ro root", mount("/srv/ref/a", "/a", true), ""},
		{"the root itself", mount("/srv/ref", "/ref", true), ""},
		{"rw below a rw root", mount("/srv/data/x", "/x", false), ""},
		{"ro below a rw root", mount("/srv/data/x", "/x", true), ""},
		{"rw below a ro root", mount("/srv/ref/a", "/a", false), "mountRoots /srv/ref is read-only"},
		{"outside every root", mount("/srv/other", "/o", true), "/srv/other lies outside the policy's mountRoots (/srv/data, /srv/ref)"},
		{"a sibling sharing the prefix", mount("/srv/reference", "/o", true), "lies outside the policy's mountRoots"},
		{"dot-dot out of a root", mount("/srv/ref/../../etc", "/e", true), "is not a clean path"},
		{"relative source", mount("srv/ref/a", "/a", true), "is not an absolute path"},
		{"relative target", mount("/srv/ref/a", "a", true), "is not an absolute path"},
		{"target in /proc", mount("/srv/ref/a", "/proc/x", true), "/proc/x"},
		{"target over /", mount("/srv/ref/a", "/", true), `"/" may not be /`},
		{"target taken by the policy", mount("/srv/ref/a", "/fixed", true), "already the target"},
		{"target over /tmp", mount("/srv/ref/a", "/tmp", true), "already the target"},
		{"target over /usr/bin", mount("/srv/ref/a", "/usr/bin", true), "target /usr/bin lies in /usr"},
		{"target below /etc", mount("/srv/ref/a", "/etc/x", true), "target /etc/x lies in /etc"},
		{"target /lib64", mount("/srv/ref/a", "/lib64", true), "lies in /lib64"},
		{"target beside /usr", mount("/srv/ref/a", "/usrx", true), ""},
		{"target below /mnt", mount("/srv/ref/a", "/mnt/ref", true), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Narrow(p, tc.n)
			if tc.want != "" {
				var ne *NarrowError
				if !errors.As(err, &ne) || ne.Field != "mounts" || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Narrow(%+v) = %v; want a NarrowError for mounts containing %q", tc.n.Mounts, err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Narrow(%+v): %v", tc.n.Mounts, err)
			}
			m := tc.n.Mounts[0]
			m.FromRoot = true // Narrow marks what the call added
			if len(got.Mounts) != 2 || !containsMount(got.Mounts, m) || !containsMount(got.Mounts, p.Mounts[0]) {
				t.Errorf("Narrow(%+v).Mounts = %+v; want the policy's mount and the new one", tc.n.Mounts, got.Mounts)
			}
			if !reflect.DeepEqual(got.MountRoots, p.MountRoots) || got.Digest == p.Digest {
				t.Errorf("Narrow kept roots %+v and digest %s; want the roots unchanged and a new digest", got.MountRoots, got.Digest)
			}
		})
	}
}

func containsMount(ms []sandbox.Mount, m sandbox.Mount) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}

func TestCheckMountSourcesCase(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "data")
	home := filepath.Join(data, "home")
	for _, d := range []string{filepath.Join(data, "ok"), home} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(data, "file"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(data, "escape")); err != nil {
		t.Fatal(err)
	}
	protected := map[string]string{"dsh home": home}
	for _, tc := range []struct {
		name, src, want string
	}{
		{"a directory", filepath.Join(data, "ok"), ""},
		{"a file", filepath.Join(data, "file"), ""},
		{"a link out of the root", filepath.Join(data, "escape"), "symbolic link"},
		{"a path through the link", filepath.Join(data, "escape", "ssl"), "symbolic link"},
		{"missing", filepath.Join(data, "none"), "does not exist"},
		{"the protected path", home, "dsh home"},
		{"inside the protected path", filepath.Join(home, "x"), "dsh home"},
		{"holding the protected path", data, "dsh home"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "inside the protected path" {
				if err := os.MkdirAll(tc.src, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			err := CheckMountSources([]sandbox.Mount{{Source: tc.src, Target: "/m", ReadOnly: true}}, protected)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("CheckMountSources(%s) = %v, want nil", tc.src, err)
				}
				return
			}
			var ne *NarrowError
			if !errors.As(err, &ne) || ne.Field != "mounts" || !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("CheckMountSources(%s) = %v; want a NarrowError for mounts containing %q", tc.src, err, tc.want)
			}
		})
	}
}
