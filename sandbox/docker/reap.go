package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// ReapReport lists what Reap removed.
type ReapReport struct {
	// Instances are the dead instances whose containers were removed;
	// this executor's own instance is never listed.
	Instances []string `json:"instances"`
	// Containers are the engine ids of the containers removed.
	Containers []string `json:"containers"`
	// Images are the engine ids of the images without a name that Reap
	// removed: images ImportRootfs made that lost their name to a later
	// import while a container still used them.
	Images []string `json:"images,omitempty"`
}

// Empty reports whether Reap found nothing to remove.
func (r ReapReport) Empty() bool {
	return len(r.Instances)+len(r.Containers)+len(r.Images) == 0
}

// instancesDir holds the lock files of live executors on StateDir.
func (e *Executor) instancesDir() string { return filepath.Join(e.opts.StateDir, "docker-instances") }

// Containers lists the engine ids of the containers this executor's
// instance owns right now (running or not), for leftover checks.
func (e *Executor) Containers(ctx context.Context) ([]string, error) {
	cs, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", sandbox.LabelOwner+"="+sandbox.LabelOwnerValue),
		filters.Arg("label", sandbox.LabelInstance+"="+e.instance),
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
// left in the engine: those of an instance whose lock file in StateDir is
// not held (its process is gone), and stopped ones of instances unknown
// here. Running containers of unknown instances may belong to a live
// service on another state directory and are left alone. Of this
// executor's own containers it removes those whose call has returned
// (their teardown failed, typically because the engine was down) and
// never one of a call in progress. Then it removes the images labelled
// owner=dsh-sandbox that have no name (see ReapReport.Images) once no
// container uses them. It keeps going after a failure and returns what
// it removed with every failure joined.
func (e *Executor) Reap(ctx context.Context) (ReapReport, error) {
	var rep ReapReport
	cs, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", sandbox.LabelOwner+"="+sandbox.LabelOwnerValue),
	)})
	if err != nil {
		return rep, unavailable(err, "reap: list containers")
	}
	dead, release, err := sandbox.LockDeadInstances(e.instancesDir(), e.instance)
	defer release()
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	for _, c := range cs {
		inst := c.Labels[sandbox.LabelInstance]
		if inst == e.instance {
			if e.active.Has(c.Labels[sandbox.LabelExecution]) {
				continue
			}
		} else if _, isDead := dead[inst]; !isDead && (sandbox.InstanceKnown(e.instancesDir(), inst) || c.State == "running") {
			continue
		}
		err := e.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("container %s: %w", c.ID, err))
			continue
		}
		rep.Containers = append(rep.Containers, c.ID)
		if inst != e.instance && !slices.Contains(rep.Instances, inst) {
			rep.Instances = append(rep.Instances, inst)
		}
	}
	for _, f := range dead {
		if err := os.Remove(f.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	imgs, err := e.reapImages(ctx, danglingGrace)
	rep.Images = imgs
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return rep, sandbox.Errorf(sandbox.ErrInternal, "docker: reap: %w", errors.Join(errs...))
	}
	return rep, nil
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
