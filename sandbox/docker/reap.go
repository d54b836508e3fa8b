package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// ReapReport lists what Reap removed.
type ReapReport struct {
	// Instances are the dead instances whose containers were removed;
	// this executor's own instance is never listed.
	Instances []string `json:"instances"`
	// Containers are the engine ids of the containers removed.
	Containers []string `json:"containers"`
}

// Empty reports whether Reap found nothing to remove.
func (r ReapReport) Empty() bool { return len(r.Instances)+len(r.Containers) == 0 }

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
// never one of a call in progress. It keeps going after a failure and
// returns what it removed with every failure joined.
func (e *Executor) Reap(ctx context.Context) (ReapReport, error) {
	var rep ReapReport
	cs, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", sandbox.LabelOwner+"="+sandbox.LabelOwnerValue),
	)})
	if err != nil {
		return rep, unavailable(err, "reap: list containers")
	}
	dead, release := e.deadInstances()
	defer release()
	var errs []error
	for _, c := range cs {
		inst := c.Labels[sandbox.LabelInstance]
		if inst == e.instance {
			if e.callActive(c.Labels[sandbox.LabelExecution]) {
				continue
			}
		} else if _, isDead := dead[inst]; !isDead && (e.knownInstance(inst) || c.State == "running") {
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
	if len(errs) > 0 {
		return rep, sandbox.Errorf(sandbox.ErrInternal, "docker: reap: %w", errors.Join(errs...))
	}
	return rep, nil
}

// callActive reports whether a Run of this executor still owns the
// container of call id.
func (e *Executor) callActive(id string) bool {
	e.activeMu.Lock()
	defer e.activeMu.Unlock()
	_, ok := e.active[id]
	return ok
}

// knownInstance reports whether inst has a lock file here (then it is
// live unless deadInstances took its lock).
func (e *Executor) knownInstance(inst string) bool {
	_, err := os.Stat(filepath.Join(e.instancesDir(), inst+".lock"))
	return err == nil
}

// deadInstances takes the lock of every other instance whose lock file is
// not held; release drops those locks.
func (e *Executor) deadInstances() (map[string]*os.File, func()) {
	dead := map[string]*os.File{}
	release := func() {
		for _, f := range dead {
			f.Close()
		}
	}
	entries, err := os.ReadDir(e.instancesDir())
	if err != nil {
		return dead, release
	}
	for _, ent := range entries {
		inst, ok := strings.CutSuffix(ent.Name(), ".lock")
		if !ok || inst == e.instance {
			continue
		}
		f, err := os.OpenFile(filepath.Join(e.instancesDir(), ent.Name()), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			continue // held: a live instance
		}
		dead[inst] = f
	}
	return dead, release
}

// lockInstance creates and locks dir/<instance>.lock for the executor's
// life; the descriptor is close-on-exec.
func lockInstance(dir, instance string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: instance lock: %v", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, instance+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: instance lock: %v", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: InstanceID %q is in use by a live executor", instance)
		}
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "docker: instance lock %q: %v", instance, err)
	}
	return f, nil
}
