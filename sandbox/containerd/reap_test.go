//go:build containerd

package containerd

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestReapRemovesLeftoversCases(t *testing.T) {
	e := newTestExecutor(t)
	ctx := e.ctx(t.Context())
	img, err := e.cli.GetImage(ctx, testImage)
	if err != nil {
		t.Fatalf("GetImage(%q) = %v", testImage, err)
	}
	// A container of this instance whose call is over (its teardown
	// failed) and an orphaned snapshot of a dead instance.
	labels := sandbox.Labels(e.instance, "call-left", "", nil)
	id := containerID("call-left")
	if _, err := e.cli.NewContainer(ctx, id,
		containerd.WithContainerLabels(labels),
		containerd.WithSnapshotter(snapshotter),
		containerd.WithNewSnapshot(id, img, snapshots.WithLabels(labels)),
		containerd.WithRuntime(runtimeName, nil),
		containerd.WithSpec(baseSpec()),
	); err != nil {
		t.Fatalf("NewContainer(%q) = %v", id, err)
	}
	orphan := "dsh-sandbox-orphan-" + e.instance
	parent, err := img.RootFS(ctx)
	if err != nil {
		t.Fatalf("RootFS() = %v", err)
	}
	chain := parent[len(parent)-1].String()
	if _, err := e.cli.SnapshotService(snapshotter).Prepare(ctx, orphan, chain, snapshots.WithLabels(sandbox.Labels(e.instance, "call-orphan", "", nil))); err != nil {
		t.Fatalf("Prepare(%q) = %v", orphan, err)
	}
	rep, err := e.Reap(t.Context())
	if err != nil {
		t.Fatalf("Reap() = %v", err)
	}
	if !slices.Contains(rep.Containers, id) || !slices.Contains(rep.Snapshots, orphan) {
		t.Errorf("Reap() = %+v, want container %q and snapshot %q", rep, id, orphan)
	}
	if left := leftovers(t, e); len(left) != 0 {
		t.Errorf("leftovers after Reap() = %q, want none", left)
	}
}

func TestRunImageMissingCases(t *testing.T) {
	e := newTestExecutor(t)
	p := testPolicy(t)
	p.Image = "no-such-image:latest"
	_, err := e.Run(t.Context(), &sandbox.Request{Command: "true", Policy: p})
	if !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Run(image %q) = %v, want sandbox.ErrNotFound", p.Image, err)
	}
}

func TestRunLeavesNoFIFOsCases(t *testing.T) {
	e := newTestExecutor(t)
	res, err := e.Run(t.Context(), &sandbox.Request{Command: "echo hi; echo err >&2", Stdin: []byte("x"), Policy: testPolicy(t)})
	if err != nil {
		t.Fatalf("Run(%q) = %v", "echo hi", err)
	}
	if res.ExitCode == nil || *res.ExitCode != 0 {
		t.Errorf("Run(%q) exit = %v, want 0", "echo hi", res.ExitCode)
	}
	dir := filepath.Join(e.opts.StateDir, "containerd-fifo")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("ReadDir(fifo dir) = %v", err)
	}
	if len(ents) != 0 {
		t.Errorf("fifo dir after Run() holds %d entries (first %q), want none", len(ents), ents[0].Name())
	}
}
