package docker

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// instancesDir holds the lock files of live executors on StateDir.
func (e *Executor) instancesDir() string { return filepath.Join(e.opts.StateDir, "docker-instances") }

// Containers lists the engine ids of the containers this executor's
// instance owns right now (running or not), for leftover checks.
func (e *Executor) Containers(ctx context.Context) ([]string, error) {
	cs, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", reap.LabelOwner+"="+reap.LabelOwnerValue),
		filters.Arg("label", reap.LabelInstance+"="+e.instance),
	)})
	if err != nil {
		return nil, unavailable(err, "list containers")
	}
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ID
	}
	return ids, nil
}

// Reap removes containers labelled owner=dsh-sandbox that a dead instance
// left in the engine, and the staging mounts of its calls (see
// reap.Report.Mounts): those of an instance whose lock file in StateDir is
// not held (its process is gone), and stopped ones of instances unknown
// here once they have been idle for reap.ForeignLeftoverGrace. Running containers of unknown instances may belong to a live
// service on another state directory and are left alone. Of this
// executor's own containers it removes those whose call has returned
// (their teardown failed, typically because the engine was down) and
// never one of a call in progress. Then it removes the images labelled
// owner=dsh-sandbox that have no name (see reap.Report.Images) once no
// container uses them. It keeps going after a failure and returns what
// it removed with every failure joined.
func (e *Executor) Reap(ctx context.Context) (reap.Report, error) {
	cs, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", reap.LabelOwner+"="+reap.LabelOwnerValue),
	)})
	if err != nil {
		return reap.Report{}, unavailable(err, "reap: list containers")
	}
	s := reap.Start("docker", e.instancesDir(), e.instance, e.active.Has)
	for _, c := range cs {
		inst := c.Labels[reap.LabelInstance]
		if !s.Leftover(inst, c.Labels[reap.LabelExecution], func() bool { return c.State != "running" && e.foreignIdle(ctx, c) }) {
			continue
		}
		err := e.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !isNotFound(err) {
			s.Fail(inst, fmt.Errorf("container %s: %w", c.ID, err))
			continue
		}
		s.Removed(reap.Containers, inst, c.ID)
	}
	// Staging mounts and egress FIFOs go after the containers that used
	// them.
	s.EachCall(reap.Mounts, e.reapBinds)
	s.EachCall(reap.Files, e.reapEgress)
	imgs, err := e.reapImages(ctx, danglingGrace)
	e.reapReplaced(ctx, &imgs)
	s.Removed(reap.Images, "", imgs...)
	s.Fail("", err)
	return s.Finish()
}

// foreignIdle reports whether the stopped container c of an instance
// unknown here has been idle for reap.ForeignLeftoverGrace: a live
// executor on another state directory may be between creating and
// starting it, or between its exit and its removal.
func (e *Executor) foreignIdle(ctx context.Context, c container.Summary) bool {
	created := time.Unix(c.Created, 0)
	var finished time.Time
	if info, err := e.cli.ContainerInspect(ctx, c.ID); err == nil && info.State != nil {
		finished, _ = time.Parse(time.RFC3339Nano, info.State.FinishedAt)
	} else if err != nil {
		return false // cannot tell: leave it for a later reap
	}
	return reap.IdleLongEnough(time.Now(), created, finished, reap.ForeignLeftoverGrace)
}

// reapImages removes the images labelled as ours that have no name and
// are older than grace; one a container still uses is left (the engine
// refuses with a conflict) for a later Reap.
func (e *Executor) reapImages(ctx context.Context, grace time.Duration) ([]string, error) {
	imgs, err := ownedImages(ctx, e.cli, true)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, img := range imgs {
		if time.Since(time.Unix(img.Created, 0)) < grace {
			continue
		}
		_, err := e.cli.ImageRemove(ctx, img.ID, image.RemoveOptions{})
		switch {
		case err == nil:
			removed = append(removed, img.ID)
		case cerrdefs.IsConflict(err) || isNotFound(err):
		default:
			errs = append(errs, fmt.Errorf("image %s: %w", img.ID, err))
		}
	}
	return removed, errors.Join(errs...)
}
