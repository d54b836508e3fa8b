package containerd

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// TestImageNamesCanonicalAndRemove imports an image by a short name
// without a tag: the namespace has it as NAME:latest (the name the other
// backends use), Images lists that name, a call runs by another spelling
// of it, and RemoveImage removes it by a third spelling; then it is not
// found, and invalid names are refused before the daemon is asked.
func TestImageNamesCanonicalAndRemove(t *testing.T) {
	e := newTestExecutor(t)
	short := "dsh-test-names-" + reap.NewInstanceID()
	canon := short + ":latest"
	var tar bytes.Buffer
	if err := images.BusyboxWith(&tar, "bash"); err != nil {
		t.Fatal(err)
	}
	if err := e.ImportRootfs(t.Context(), &tar, short, testImageEnv); err != nil {
		t.Fatalf("ImportRootfs(%q) = %v", short, err)
	}
	t.Cleanup(func() { _, _ = e.RemoveImage(t.Context(), canon) })
	if _, err := e.cli.GetImage(e.ctx(t.Context()), canon); err != nil {
		t.Errorf("GetImage(%q) after ImportRootfs(%q) = %v", canon, short, err)
	}
	imgs, err := e.Images(t.Context())
	if err != nil || !slices.ContainsFunc(imgs, func(i images.Image) bool { return i.Name == canon }) {
		t.Errorf("Images() = %v, %v; want it to list %q", imgs, err, canon)
	}
	req := &sandbox.Request{Command: "echo ran", Session: sandbox.Session{Cwd: t.TempDir()}, Policy: testPolicy(t)}
	req.Policy.Image = "docker.io/library/" + short
	if res, err := e.Run(t.Context(), req); err != nil || res.ExitCode == nil || *res.ExitCode != 0 || res.Stdout.Text != "ran\n" {
		t.Errorf("Run(image %q) = %+v, %v; want exit 0 and \"ran\\n\"", req.Policy.Image, res, err)
	}
	if got, err := e.RemoveImage(t.Context(), short); err != nil || got != canon {
		t.Errorf("RemoveImage(%q) = %q, %v; want %q", short, got, err, canon)
	}
	if _, err := e.RemoveImage(t.Context(), canon); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("RemoveImage(%q) twice = %v, want an error wrapping %v", canon, err, sandbox.ErrNotFound)
	}
	req.Policy.Image = short
	if _, err := e.Run(t.Context(), req); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Run(image %q) after RemoveImage = %v, want an error wrapping %v", short, err, sandbox.ErrNotFound)
	}
	for _, bad := range []string{"Bad", "host", "x@sha256:00", "../x"} {
		if _, err := e.RemoveImage(t.Context(), bad); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("RemoveImage(%q) = %v, want an error wrapping %v", bad, err, sandbox.ErrInvalid)
		}
	}
}

// TestQualifiedNameCases lists the Docker Hub spellings a lookup falls
// back to.
func TestQualifiedNameCases(t *testing.T) {
	for _, tc := range []struct{ canon, want string }{
		{"bb2:latest", "docker.io/library/bb2:latest"},
		{"myorg/tools:1", "docker.io/myorg/tools:1"},
		{"registry.example:5000/myorg/tools:1", ""},
		{"localhost/tools:1", ""},
	} {
		if got := qualifiedName(tc.canon); got != tc.want {
			t.Errorf("qualifiedName(%q) = %q, want %q", tc.canon, got, tc.want)
		}
	}
}
