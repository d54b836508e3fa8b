package docker

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// importTestRootfs imports the test root filesystem as name with env and
// returns the image's id.
func importTestRootfs(t *testing.T, e *Executor, name string, env ...string) string {
	t.Helper()
	var tar bytes.Buffer
	if err := testRootfsTar(&tar); err != nil {
		t.Fatalf("testRootfsTar: %v", err)
	}
	if err := e.ImportRootfs(t.Context(), &tar, name, env); err != nil {
		t.Fatalf("ImportRootfs(%q) = %v", name, err)
	}
	img, err := e.cli.ImageInspect(t.Context(), name)
	if err != nil {
		t.Fatalf("ImageInspect(%q) after ImportRootfs = %v", name, err)
	}
	return img.ID
}

// TestImportRootfsReplaces imports one name three times: each import
// labels its image as ours with the given env; the replaced image is
// removed at once unless a container uses it, in which case it is left
// without a name until Reap finds it unused.
func TestImportRootfsReplaces(t *testing.T) {
	e := newTestExecutor(t)
	const name = "dsh-sandbox-test-import:latest"
	t.Cleanup(func() {
		_, _ = e.cli.ImageRemove(context.Background(), name, image.RemoveOptions{})
	})
	gone := func(id string) bool {
		_, err := e.cli.ImageInspect(t.Context(), id)
		return isNotFound(err)
	}

	first := importTestRootfs(t, e, name, "PATH=/bin", "STAGE=first")
	img, err := e.cli.ImageInspect(t.Context(), first)
	if err != nil {
		t.Fatal(err)
	}
	if got := img.Config.Labels[reap.LabelOwner]; got != reap.LabelOwnerValue {
		t.Errorf("ImportRootfs(%q) label %s = %q, want %q", name, reap.LabelOwner, got, reap.LabelOwnerValue)
	}
	if want := []string{"PATH=/bin", "STAGE=first"}; !slices.Equal(img.Config.Env, want) {
		t.Errorf("ImportRootfs(%q) env = %q, want %q", name, img.Config.Env, want)
	}

	// A container of the first image holds it.
	holder, err := e.cli.ContainerCreate(t.Context(), &container.Config{Image: name, Cmd: []string{"true"}, Labels: map[string]string{reap.LabelOwner: "test-holder"}}, nil, nil, nil, "")
	if err != nil {
		t.Fatalf("ContainerCreate(%q) = %v", name, err)
	}
	removeHolder := func() {
		if err := e.cli.ContainerRemove(context.Background(), holder.ID, container.RemoveOptions{Force: true}); err != nil && !isNotFound(err) {
			t.Errorf("ContainerRemove(%s) = %v", holder.ID, err)
		}
	}
	t.Cleanup(removeHolder)

	second := importTestRootfs(t, e, name, "PATH=/bin", "STAGE=second")
	if second == first {
		t.Fatalf("ImportRootfs(%q) again kept image %s", name, first)
	}
	if gone(first) {
		t.Fatalf("ImportRootfs(%q) removed the replaced image %s while a container uses it", name, first)
	}
	removed, err := e.reapImages(t.Context(), 0)
	if err != nil || slices.Contains(removed, first) {
		t.Errorf("reapImages() while a container uses %s = %v, %v; want it kept", first, removed, err)
	}
	removeHolder()
	removed, err = e.reapImages(t.Context(), 0)
	if err != nil || !slices.Contains(removed, first) || !gone(first) {
		t.Errorf("reapImages() once %s is unused = %v, %v (gone %v); want it removed", first, removed, err, gone(first))
	}

	third := importTestRootfs(t, e, name, "PATH=/bin", "STAGE=third")
	if !gone(second) {
		t.Errorf("ImportRootfs(%q) left the unused replaced image %s", name, second)
	}
	img, err = e.cli.ImageInspect(t.Context(), name)
	if err != nil || img.ID != third {
		t.Errorf("ImageInspect(%q) after the third import = %v, %v; want %s", name, img.ID, err, third)
	}
}

// TestImportRootfsInvalid refuses bad names and env entries before the
// engine sees anything.
func TestImportRootfsInvalid(t *testing.T) {
	e := newTestExecutor(t)
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"Bad Name", nil},
		{"dsh-sandbox-test-invalid:latest", []string{"NOEQUALS"}},
		{"dsh-sandbox-test-invalid:latest", []string{"A=1\nLABEL x=y"}},
	} {
		err := e.ImportRootfs(t.Context(), bytes.NewReader(nil), tc.name, tc.env)
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("ImportRootfs(%q, %q) = %v, want an error wrapping %v", tc.name, tc.env, err, sandbox.ErrInvalid)
		}
	}
}
