package containerd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	cerrdefs "github.com/containerd/errdefs"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// labelFilter is the containerd filter for a label's value.
func labelFilter(key, value string) string {
	return "labels." + strconv.Quote(key) + "==" + value
}

// Containers lists the ids of the containers this executor's instance
// owns right now, for leftover checks.
func (e *Executor) Containers(ctx context.Context) ([]string, error) {
	cs, err := e.cli.Containers(e.ctx(ctx), labelFilter(sandbox.LabelOwner, sandbox.LabelOwnerValue)+","+labelFilter(sandbox.LabelInstance, e.instance))
	if err != nil {
		return nil, classify(err, "list containers")
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID()
	}
	return ids, nil
}

// Snapshots lists the keys of the snapshots labelled with this
// executor's instance, for leftover checks.
func (e *Executor) Snapshots(ctx context.Context) ([]string, error) {
	var keys []string
	err := e.cli.SnapshotService(snapshotter).Walk(e.ctx(ctx), func(_ context.Context, info snapshots.Info) error {
		keys = append(keys, info.Name)
		return nil
	}, labelFilter(sandbox.LabelOwner, sandbox.LabelOwnerValue)+","+labelFilter(sandbox.LabelInstance, e.instance))
	if err != nil {
		return nil, classify(err, "list snapshots")
	}
	return keys, nil
}

// Reap removes what calls left in the namespace, by label
// owner=dsh-sandbox, telling instances apart by their lock files in
// StateDir/containerd-instances:
//
//   - of a dead instance (its lock file exists and no process holds it):
//     every container with its task (killed when still running) and
//     snapshot, every orphaned snapshot, its cgroup directories and
//     finally its lock file;
//   - of this executor: containers and orphaned snapshots of calls that
//     have returned (their teardown failed, typically because the daemon
//     was down), never those of a call in progress;
//   - of an instance unknown here (no lock file: a service on another
//     state directory, or one long gone): only containers whose task is
//     not running and that have been idle for
//     sandbox.ForeignLeftoverGrace; its orphaned snapshots are left alone, as they may be
//     a live executor's call being created;
//   - of a live instance on this state directory: nothing.
//
// It keeps going after a failure and returns what it removed with every
// failure joined.
func (e *Executor) Reap(ctx context.Context) (sandbox.ReapReport, error) {
	var rep sandbox.ReapReport
	ctx = e.ctx(ctx)
	cs, err := e.cli.Containers(ctx, labelFilter(sandbox.LabelOwner, sandbox.LabelOwnerValue))
	if err != nil {
		return rep, classify(err, "reap: list containers")
	}
	dead, release, err := sandbox.LockDeadInstances(e.instancesDir(), e.instance)
	defer release()
	var errs []error
	if err != nil {
		errs = append(errs, sandbox.Errorf(sandbox.ErrInternal, "containerd: reap: instance locks: %w", err))
	}
	failed := map[string]bool{} // dead instances with leftovers that remain
	removed := func(inst string) {
		if inst != e.instance && !slices.Contains(rep.Instances, inst) {
			rep.Instances = append(rep.Instances, inst)
		}
	}
	used := map[string]bool{}
	for _, c := range cs {
		info, err := c.Info(ctx, containerd.WithoutRefreshedMetadata)
		if err != nil {
			if !cerrdefs.IsNotFound(err) {
				errs = append(errs, classify(err, "reap: container %s", c.ID()))
			}
			continue
		}
		used[info.SnapshotKey] = true
		// A user-namespaced call's snapshot has the container's id as
		// key and is not in its record (withoutShimRootfs).
		used[c.ID()] = true
		inst := info.Labels[sandbox.LabelInstance]
		_, isDead := dead[inst]
		switch {
		case inst == e.instance:
			if e.active.Has(info.Labels[sandbox.LabelExecution]) {
				continue
			}
		case isDead:
		case sandbox.InstanceKnown(e.instancesDir(), inst) || running(ctx, c) || !foreignIdle(ctx, c, info.CreatedAt, e.foreignGrace):
			continue
		}
		if err := deleteContainer(ctx, c); err != nil {
			errs = append(errs, classify(err, "reap: remove container %s", c.ID()))
			failed[inst] = true
			continue
		}
		delete(used, info.SnapshotKey)
		if err := e.cli.SnapshotService(snapshotter).Remove(ctx, c.ID()); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, classify(err, "reap: remove snapshot %s", c.ID()))
			failed[inst] = true
		}
		delete(used, c.ID())
		rep.Containers = append(rep.Containers, c.ID())
		removed(inst)
	}

	sn := e.cli.SnapshotService(snapshotter)
	type orphan struct{ key, inst string }
	var orphans []orphan
	err = sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if used[info.Name] {
			return nil
		}
		inst := info.Labels[sandbox.LabelInstance]
		_, isDead := dead[inst]
		if isDead || (inst == e.instance && !e.active.Has(info.Labels[sandbox.LabelExecution])) {
			orphans = append(orphans, orphan{info.Name, inst})
		}
		return nil
	}, labelFilter(sandbox.LabelOwner, sandbox.LabelOwnerValue))
	if err != nil {
		errs = append(errs, classify(err, "reap: list snapshots"))
		for inst := range dead {
			failed[inst] = true // its snapshots are unknown
		}
	}
	for _, o := range orphans {
		if err := sn.Remove(ctx, o.key); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, classify(err, "reap: remove snapshot %s", o.key))
			failed[o.inst] = true
			continue
		}
		rep.Snapshots = append(rep.Snapshots, o.key)
		removed(o.inst)
	}

	// Mounts of user-namespaced calls (their containers are gone now):
	// all of a dead instance's, this instance's of calls not running.
	idmapRoot := filepath.Join(e.opts.StateDir, idmapDir)
	ents, err := os.ReadDir(idmapRoot)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, sandbox.Errorf(sandbox.ErrInternal, "containerd: reap: %w", err))
	}
	for _, ent := range ents {
		inst := ent.Name()
		_, isDead := dead[inst]
		keep := func(string) bool { return false }
		switch {
		case isDead && !failed[inst]:
		case inst == e.instance:
			keep = e.active.Has
		default:
			continue
		}
		calls, err := removeCallDirs(filepath.Join(idmapRoot, inst), isDead, keep)
		if err != nil {
			errs = append(errs, sandbox.Errorf(sandbox.ErrInternal, "containerd: reap: call mounts of instance %q: %w", inst, err))
			failed[inst] = true
		}
		if len(calls) > 0 {
			rep.Mounts = append(rep.Mounts, calls...)
			removed(inst)
		}
	}

	// Cgroup directories of dead instances (their tasks are gone now),
	// and the empty parent.
	for _, inst := range cgroupInstances() {
		if _, isDead := dead[inst]; !isDead || failed[inst] {
			continue
		}
		p := "/" + cgroupParent + "/" + inst
		if _, err := killCgroup(p); err != nil {
			errs = append(errs, sandbox.Errorf(sandbox.ErrInternal, "containerd: reap: %w", err))
		}
		if err := removeCgroup(p); err != nil {
			errs = append(errs, sandbox.Errorf(sandbox.ErrInternal, "containerd: reap: %w", err))
			failed[inst] = true
			continue
		}
		removed(inst)
	}
	removeEmptyCgroupParent()

	for inst, f := range dead {
		if failed[inst] {
			continue
		}
		if err := os.Remove(f.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, sandbox.Errorf(sandbox.ErrInternal, "containerd: reap: lock file of instance %q: %w", inst, err))
		}
	}
	return rep, errors.Join(errs...)
}

// running reports whether c has a task that has not stopped.
// foreignIdle reports whether the container c of an instance unknown
// here, created at created and with no running task, has been idle for
// sandbox.ForeignLeftoverGrace: a live executor on another state
// directory may be between creating its container and starting the task,
// or between the task's exit and its removal.
func foreignIdle(ctx context.Context, c containerd.Container, created time.Time, grace time.Duration) bool {
	var finished time.Time
	if task, err := c.Task(ctx, nil); err == nil {
		st, err := task.Status(ctx)
		if err != nil {
			return false // cannot tell: leave it for a later reap
		}
		finished = st.ExitTime
	}
	return sandbox.IdleLongEnough(time.Now(), created, finished, grace)
}

func running(ctx context.Context, c containerd.Container) bool {
	task, err := c.Task(ctx, nil)
	if err != nil {
		return false
	}
	st, err := task.Status(ctx)
	if err != nil {
		return false
	}
	return st.Status != containerd.Stopped
}
