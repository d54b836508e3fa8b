package containerd

import (
	"context"
	"errors"
	"strconv"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/snapshots"
	cerrdefs "github.com/containerd/errdefs"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// ReapReport lists what Reap removed.
type ReapReport struct {
	// Containers are the ids of the containers removed (with their task
	// and snapshot).
	Containers []string `json:"containers"`
	// Snapshots are the keys of orphaned snapshots removed.
	Snapshots []string `json:"snapshots"`
}

// Empty reports whether Reap found nothing to remove.
func (r ReapReport) Empty() bool { return len(r.Containers)+len(r.Snapshots) == 0 }

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

// Reap removes what calls left in the namespace: containers labelled
// owner=dsh-sandbox of this executor whose call has returned, containers
// of other instances whose task is not running (a running one may belong
// to a live executor elsewhere), and labelled snapshots no container
// uses. It keeps going after a failure and returns what it removed with
// every failure joined.
func (e *Executor) Reap(ctx context.Context) (ReapReport, error) {
	var rep ReapReport
	ctx = e.ctx(ctx)
	cs, err := e.cli.Containers(ctx, labelFilter(sandbox.LabelOwner, sandbox.LabelOwnerValue))
	if err != nil {
		return rep, classify(err, "reap: list containers")
	}
	var errs []error
	used := map[string]bool{}
	for _, c := range cs {
		info, err := c.Info(ctx, containerd.WithoutRefreshedMetadata)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		used[info.SnapshotKey] = true
		if info.Labels[sandbox.LabelInstance] == e.instance {
			if e.callActive(info.Labels[sandbox.LabelExecution]) {
				continue
			}
		} else if running(ctx, c) {
			continue
		}
		if err := deleteContainer(ctx, c); err != nil {
			errs = append(errs, classify(err, "reap: remove container %s", c.ID()))
			continue
		}
		delete(used, info.SnapshotKey)
		rep.Containers = append(rep.Containers, c.ID())
	}
	sn := e.cli.SnapshotService(snapshotter)
	var orphans []string
	err = sn.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		if !used[info.Name] && !e.callActive(info.Labels[sandbox.LabelExecution]) {
			orphans = append(orphans, info.Name)
		}
		return nil
	}, labelFilter(sandbox.LabelOwner, sandbox.LabelOwnerValue))
	if err != nil {
		errs = append(errs, classify(err, "reap: list snapshots"))
	}
	for _, key := range orphans {
		if err := sn.Remove(ctx, key); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, classify(err, "reap: remove snapshot %s", key))
			continue
		}
		rep.Snapshots = append(rep.Snapshots, key)
	}
	return rep, errors.Join(errs...)
}

// callActive reports whether Run still owns the container of call id.
func (e *Executor) callActive(id string) bool {
	e.activeMu.Lock()
	defer e.activeMu.Unlock()
	_, ok := e.active[id]
	return ok
}

// running reports whether c has a task that has not stopped.
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
