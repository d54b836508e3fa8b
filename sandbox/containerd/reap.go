package containerd

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	cerrdefs "github.com/containerd/errdefs"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/idmap"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// labelFilter is the containerd filter for a label's value.
func labelFilter(key, value string) string {
	return "labels." + strconv.Quote(key) + "==" + value
}

// Containers lists the ids of the containers this executor's instance
// owns right now, for leftover checks.
func (e *Executor) Containers(ctx context.Context) ([]string, error) {
	cs, err := e.cli.Containers(e.ctx(ctx), labelFilter(reap.LabelOwner, reap.LabelOwnerValue)+","+labelFilter(reap.LabelInstance, e.instance))
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
	}, labelFilter(reap.LabelOwner, reap.LabelOwnerValue)+","+labelFilter(reap.LabelInstance, e.instance))
	if err != nil {
		return nil, classify(err, "list snapshots")
	}
	return keys, nil
}

// Reap removes what calls left in the namespace, by label
// owner=dsh-sandbox, telling instances apart by their lock files in
// StateDir/containerd-instances (see reap.Sweep.Leftover):
//
//   - of a dead instance (its lock file exists and no process holds it):
//     every container with its task (killed when still running) and
//     snapshot, every orphaned snapshot, its call mounts, its cgroup
//     directories and finally its lock file;
//   - of this executor: containers, orphaned snapshots and call mounts of
//     calls that have returned (their teardown failed, typically because
//     the daemon was down), never those of a call in progress;
//   - of an instance unknown here (no lock file: a service on another
//     state directory, or one long gone): only containers whose task is
//     not running and that have been idle for
//     reap.ForeignLeftoverGrace; its orphaned snapshots are left alone,
//     as they may be a live executor's call being created;
//   - of a live instance on this state directory: nothing.
//
// It keeps going after a failure and returns what it removed with every
// failure joined; a dead instance with a failure keeps the rest for a
// later Reap.
func (e *Executor) Reap(ctx context.Context) (reap.Report, error) {
	ctx = e.ctx(ctx)
	cs, err := e.cli.Containers(ctx, labelFilter(reap.LabelOwner, reap.LabelOwnerValue))
	if err != nil {
		return reap.Report{}, classify(err, "reap: list containers")
	}
	s := reap.Start("containerd", e.instancesDir(), e.instance, e.active.Has)
	used := e.reapContainers(ctx, s, cs)
	e.reapSnapshots(ctx, s, used)
	// Mounts of user-namespaced calls (their containers are gone now).
	idmapRoot := filepath.Join(e.opts.StateDir, idmapDir)
	s.EachCall(reap.Mounts, func(inst string, keep func(string) bool) ([]string, error) {
		calls, _, err := idmap.RemoveCallDirs(filepath.Join(idmapRoot, inst), inst != e.instance, keep)
		return calls, err
	})
	// Cgroup directories of dead instances (their tasks are gone now).
	s.EachDead(reap.Cgroups, func(inst string) ([]string, error) {
		if !slices.Contains(cgroupInstances(), inst) {
			return nil, nil
		}
		p := "/" + cgroupParent + "/" + inst
		dirs := cgroupDirs(p)
		_, kerr := killCgroup(p)
		if err := removeCgroup(p); err != nil {
			return nil, errors.Join(kerr, err)
		}
		return dirs, kerr
	})
	removeEmptyCgroupParent()
	return s.Finish()
}

// reapContainers removes the leftover containers of cs with their task
// and snapshot, and returns the snapshot keys the others still use.
func (e *Executor) reapContainers(ctx context.Context, s *reap.Sweep, cs []containerd.Container) map[string]bool {
	used := map[string]bool{}
	for _, c := range cs {
		info, err := c.Info(ctx, containerd.WithoutRefreshedMetadata)
		if err != nil {
			if !cerrdefs.IsNotFound(err) {
				s.Fail("", classify(err, "container %s", c.ID()))
			}
			continue
		}
		inst := info.Labels[reap.LabelInstance]
		foreign := func() bool { return !running(ctx, c) && foreignIdle(ctx, c, info.CreatedAt, e.foreignGrace) }
		if !s.Leftover(inst, info.Labels[reap.LabelExecution], foreign) {
			used[info.SnapshotKey] = true
			// A user-namespaced call's snapshot has the container's id
			// as key and is not in its record (withoutShimRootfs).
			used[c.ID()] = true
			continue
		}
		if err := deleteContainer(ctx, c); err != nil {
			s.Fail(inst, classify(err, "remove container %s", c.ID()))
			used[info.SnapshotKey], used[c.ID()] = true, true
			continue
		}
		if err := e.cli.SnapshotService(snapshotter).Remove(ctx, c.ID()); err != nil && !cerrdefs.IsNotFound(err) {
			s.Fail(inst, classify(err, "remove snapshot %s", c.ID()))
		}
		s.Removed(reap.Containers, inst, c.ID())
	}
	return used
}

// reapSnapshots removes the orphaned snapshots (no container uses them)
// of dead instances and of this instance's calls not in progress.
func (e *Executor) reapSnapshots(ctx context.Context, s *reap.Sweep, used map[string]bool) {
	sn := e.cli.SnapshotService(snapshotter)
	type orphan struct{ key, inst string }
	var orphans []orphan
	err := sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		inst := info.Labels[reap.LabelInstance]
		if !used[info.Name] && s.Leftover(inst, info.Labels[reap.LabelExecution], nil) {
			orphans = append(orphans, orphan{info.Name, inst})
		}
		return nil
	}, labelFilter(reap.LabelOwner, reap.LabelOwnerValue))
	if err != nil {
		s.FailAll(classify(err, "list snapshots"))
	}
	for _, o := range orphans {
		if err := sn.Remove(ctx, o.key); err != nil && !cerrdefs.IsNotFound(err) {
			s.Fail(o.inst, classify(err, "remove snapshot %s", o.key))
			continue
		}
		s.Removed(reap.Snapshots, o.inst, o.key)
	}
}

// running reports whether c has a task that has not stopped.
// foreignIdle reports whether the container c of an instance unknown
// here, created at created and with no running task, has been idle for
// reap.ForeignLeftoverGrace: a live executor on another state
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
	return reap.IdleLongEnough(time.Now(), created, finished, grace)
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
