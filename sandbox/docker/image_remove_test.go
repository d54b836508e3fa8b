package docker

import (
	"errors"
	"slices"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// TestImageNamesCanonicalAndRemove imports an image by a name with a
// namespace and no tag: the engine has it as NAME:latest, Images lists
// that name, a call runs by another spelling of it, and RemoveImage
// removes it by a third spelling; then it is not found, and invalid
// names are refused before the engine is asked.
func TestImageNamesCanonicalAndRemove(t *testing.T) {
	e := newTestExecutor(t)
	repo := "dsh-sandbox-test/names-" + reap.NewInstanceID()
	canon := repo + ":latest"
	importTestRootfs(t, e, repo, testImageEnv...)
	t.Cleanup(func() { e.removeImage(t.Context(), canon) })

	imgs, err := e.Images(t.Context())
	if err != nil || !slices.ContainsFunc(imgs, func(i images.Image) bool { return i.Name == canon }) {
		t.Errorf("Images() = %v, %v; want it to list %q", imgs, err, canon)
	}
	req := &sandbox.Request{Command: "echo ran", Session: sandbox.Session{Cwd: t.TempDir()}, Policy: testPolicy(t)}
	req.Policy.Image = "docker.io/" + repo
	if res, err := e.Run(t.Context(), req); err != nil || res.ExitCode == nil || *res.ExitCode != 0 || res.Stdout.Text != "ran\n" {
		t.Errorf("Run(image %q) = %+v, %v; want exit 0 and \"ran\\n\"", req.Policy.Image, res, err)
	}
	if got, err := e.RemoveImage(t.Context(), "docker.io/"+canon); err != nil || got != canon {
		t.Errorf("RemoveImage(%q) = %q, %v; want %q", "docker.io/"+canon, got, err, canon)
	}
	if _, err := e.cli.ImageInspect(t.Context(), canon); !isNotFound(err) {
		t.Errorf("ImageInspect(%q) after RemoveImage = %v, want not found", canon, err)
	}
	if _, err := e.RemoveImage(t.Context(), repo); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("RemoveImage(%q) twice = %v, want an error wrapping %v", repo, err, sandbox.ErrNotFound)
	}
	for _, bad := range []string{"Bad", "host", "x@sha256:00", "../x"} {
		if _, err := e.RemoveImage(t.Context(), bad); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("RemoveImage(%q) = %v, want an error wrapping %v", bad, err, sandbox.ErrInvalid)
		}
		req.Policy.Image = bad
		if _, err := e.Run(t.Context(), req); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Run(image %q) = %v, want an error wrapping %v", bad, err, sandbox.ErrInvalid)
		}
	}
}
