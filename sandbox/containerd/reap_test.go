package containerd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/cio"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

func TestReapRemovesLeftoversCases(t *testing.T) {
	e := newTestExecutor(t)
	// A container of this instance whose call is over (its teardown
	// failed) and an orphaned snapshot of a call of this instance that is
	// not in progress.
	id := testContainer(t, e, e.instance, "call-left-"+e.instance, false)
	orphan := testSnapshot(t, e, e.instance, "call-orphan-"+e.instance)
	rep, err := e.Reap(t.Context())
	if err != nil {
		t.Fatalf("Reap() = %v", err)
	}
	if !slices.Contains(rep.Containers, id) || !slices.Contains(rep.Snapshots, orphan) || len(rep.Instances) != 0 {
		t.Errorf("Reap() = %+v, want container %q and snapshot %q, no instance", rep, id, orphan)
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

// testContainer creates a container of instance inst for call in e's
// namespace, on a labelled snapshot of the test image; with run, its
// task runs `sleep 300` in the call's cgroup. It returns the container
// id.
func testContainer(t *testing.T, e *Executor, inst, call string, run bool) string {
	t.Helper()
	ctx := e.ctx(t.Context())
	img, err := e.cli.GetImage(ctx, testImage)
	if err != nil {
		t.Fatalf("GetImage(%q) = %v", testImage, err)
	}
	labels := reap.Labels(inst, call, "", nil)
	opts, err := policy.SpecOpts(testPolicy(t), sandbox.Session{}, 65534, 65534)
	if err != nil {
		t.Fatalf("policy.SpecOpts() = %v", err)
	}
	spec := policy.BaseSpec("rootfs", nil)
	for _, o := range append(opts,
		policy.WithProcess([]string{"sleep", "300"}, testImageEnv, "/"),
		policy.WithCgroupsPath(cgroupsPath(inst, call)),
	) {
		if err := o(spec); err != nil {
			t.Fatal(err)
		}
	}
	id := containerID(call)
	c, err := e.cli.NewContainer(ctx, id,
		containerd.WithContainerLabels(labels),
		containerd.WithSnapshotter(snapshotter),
		containerd.WithNewSnapshot(id, img, snapshots.WithLabels(labels)),
		containerd.WithRuntime(runtimeName, nil),
		containerd.WithSpec(spec),
	)
	if err != nil {
		t.Fatalf("NewContainer(%q) = %v", id, err)
	}
	t.Cleanup(func() { _ = deleteContainer(context.Background(), c) })
	if run {
		task, err := c.NewTask(ctx, cio.NullIO)
		if err != nil {
			t.Fatalf("NewTask(%q) = %v", id, err)
		}
		if err := task.Start(ctx); err != nil {
			t.Fatalf("Start(%q) = %v", id, err)
		}
	}
	return id
}

// testSnapshot prepares an orphaned snapshot labelled with inst and
// call on the test image and returns its key.
func testSnapshot(t *testing.T, e *Executor, inst, call string) string {
	t.Helper()
	ctx := e.ctx(t.Context())
	img, err := e.cli.GetImage(ctx, testImage)
	if err != nil {
		t.Fatalf("GetImage(%q) = %v", testImage, err)
	}
	diffs, err := img.RootFS(ctx)
	if err != nil {
		t.Fatalf("RootFS() = %v", err)
	}
	key := "dsh-sandbox-orphan-" + call
	sn := e.cli.SnapshotService(snapshotter)
	labels := reap.Labels(inst, call, "", nil)
	// Without a reference the daemon's garbage collector would remove
	// it before Reap could.
	labels["containerd.io/gc.root"] = time.Now().UTC().Format(time.RFC3339)
	if _, err := sn.Prepare(ctx, key, diffs[len(diffs)-1].String(), snapshots.WithLabels(labels)); err != nil {
		t.Fatalf("Prepare(%q) = %v", key, err)
	}
	t.Cleanup(func() { _ = sn.Remove(context.Background(), key) })
	return key
}

// exists reports whether the container id is still in e's namespace.
func exists(t *testing.T, e *Executor, id string) bool {
	t.Helper()
	_, err := e.cli.LoadContainer(e.ctx(t.Context()), id)
	return err == nil
}

// snapshotExists reports whether the snapshot key is still there.
func snapshotExists(t *testing.T, e *Executor, key string) bool {
	t.Helper()
	_, err := e.cli.SnapshotService(snapshotter).Stat(e.ctx(t.Context()), key)
	return err == nil
}

// die makes x an executor whose process died: the kernel drops its
// lock, the file stays.
func die(x *Executor) {
	x.lock.Close()
	x.lock = nil
	x.cli.Close()
}

// TestReapDeadInstanceCases: an executor on the same state directory
// dies (its lock is released, its file stays) leaving a container whose
// task still runs, a stopped one and an orphaned snapshot; Reap removes
// all of them, the task's cgroup and the lock file, and names the
// instance.
func TestReapDeadInstanceCases(t *testing.T) {
	e := newTestExecutor(t)
	dead, err := New(t.Context(), Options{Address: e.opts.Address, Namespace: e.opts.Namespace, Service: driver.Service{StateDir: e.opts.StateDir}})
	if err != nil {
		t.Fatalf("New(second instance) = %v", err)
	}
	inst := dead.instance
	suffix := "-" + inst
	running := testContainer(t, e, inst, "dead-run"+suffix, true)
	stopped := testContainer(t, e, inst, "dead-stop"+suffix, false)
	orphan := testSnapshot(t, e, inst, "dead-orphan"+suffix)
	if len(cgroupDirs(cgroupsPath(inst, "dead-run"+suffix))) == 0 {
		t.Fatalf("the running task of %s has no cgroup directory", running)
	}
	lockFile := dead.lock.Name()
	die(dead)

	rep, err := e.Reap(t.Context())
	if err != nil {
		t.Errorf("Reap() = %v", err)
	}
	if !slices.Contains(rep.Instances, inst) || !slices.Contains(rep.Containers, running) || !slices.Contains(rep.Containers, stopped) || !slices.Contains(rep.Snapshots, orphan) {
		t.Errorf("Reap() = %+v, want instance %s, containers %s and %s, snapshot %s", rep, inst, running, stopped, orphan)
	}
	for _, id := range []string{running, stopped} {
		if exists(t, e, id) {
			t.Errorf("container %s of the dead instance exists after Reap()", id)
		}
	}
	if snapshotExists(t, e, orphan) {
		t.Errorf("snapshot %s of the dead instance exists after Reap()", orphan)
	}
	if d := cgroupDirs("/" + cgroupParent + "/" + inst); len(d) != 0 {
		t.Errorf("cgroup directories of the dead instance after Reap() = %q, want none", d)
	}
	if _, err := os.Stat(lockFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file of the dead instance after Reap(): stat = %v, want not exist", err)
	}
}

// TestReapLiveForeignInstanceCases: Reap leaves everything of a live
// executor on the same state directory alone (running and stopped
// containers, an orphaned snapshot: its call may be being created); of
// an instance unknown here it removes only the stopped container, and
// only once it has been idle for the grace period.
func TestReapLiveForeignInstanceCases(t *testing.T) {
	e := newTestExecutor(t)
	live, err := New(t.Context(), Options{Address: e.opts.Address, Namespace: e.opts.Namespace, Service: driver.Service{StateDir: e.opts.StateDir}})
	if err != nil {
		t.Fatalf("New(second instance) = %v", err)
	}
	defer live.Close()
	unknown := "i-unknown-" + e.instance
	// Cleanups run last first: this one after those of testContainer,
	// which delete the tasks with their call cgroups.
	t.Cleanup(func() {
		for _, inst := range []string{live.instance, unknown} {
			_ = removeCgroup("/" + cgroupParent + "/" + inst)
		}
		removeEmptyCgroupParent()
	})
	liveRun := testContainer(t, e, live.instance, "live-run-"+live.instance, true)
	liveStop := testContainer(t, e, live.instance, "live-stop-"+live.instance, false)
	liveOrphan := testSnapshot(t, e, live.instance, "live-orphan-"+live.instance)
	unkRun := testContainer(t, e, unknown, "unk-run-"+e.instance, true)
	unkStop := testContainer(t, e, unknown, "unk-stop-"+e.instance, false)
	unkOrphan := testSnapshot(t, e, unknown, "unk-orphan-"+e.instance)

	// A stopped container of an unknown instance may be a live executor's
	// on another state directory, between create and start: fresh, it is
	// kept.
	if _, err := e.Reap(t.Context()); err != nil {
		t.Errorf("Reap() = %v", err)
	}
	if !exists(t, e, unkStop) {
		t.Errorf("Reap() removed the fresh stopped container %s of an unknown instance, want it kept for %v", unkStop, reap.ForeignLeftoverGrace)
	}
	e.foreignGrace = 0 // idle long enough now
	rep, err := e.Reap(t.Context())
	if err != nil {
		t.Errorf("Reap() = %v", err)
	}
	for _, id := range []string{liveRun, liveStop, unkRun} {
		if !exists(t, e, id) {
			t.Errorf("Reap() removed container %s, want it kept", id)
		}
	}
	for _, key := range []string{liveOrphan, unkOrphan} {
		if !snapshotExists(t, e, key) {
			t.Errorf("Reap() removed snapshot %s, want it kept", key)
		}
	}
	if exists(t, e, unkStop) || !slices.Contains(rep.Containers, unkStop) {
		t.Errorf("Reap() = %+v; want the stopped container %s of the unknown instance removed", rep, unkStop)
	}
	if slices.Contains(rep.Instances, live.instance) {
		t.Errorf("Reap() = %+v, want the live instance %s not listed", rep, live.instance)
	}
	if len(cgroupDirs(cgroupsPath(live.instance, "live-run-"+live.instance))) == 0 {
		t.Errorf("Reap() removed the cgroup of the live instance's running task")
	}
}
