package oci

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// unmarkedBundleAge is how old a bundle directory without a marker must
// be before Reap removes it. The marker is written right after the
// directory is made, so only a crash in between leaves one without; a
// young one may belong to a call being set up right now.
const unmarkedBundleAge = 10 * time.Minute

// unmarkedBundleSettle is how old a bundle without a marker must be
// before the Reap of an executor with a warm pool removes it when no
// other instance can be making it: the marker follows the directory at
// once, so only a crash leaves one older, and a slot the pool is
// preparing in the background (which the executor's gate does not hold
// back) is given time. An executor without a pool that is alone on the
// state directory makes no bundle while it reaps, so it waits for none
// (`dsh-sandbox reap` right after a crash removes them all).
const unmarkedBundleSettle = 5 * time.Second

// cgroupReapWait bounds the wait for one busy cgroup directory during Reap.
const cgroupReapWait = 2 * time.Second

// ReapDead is Reap for a command about to run calls (exec, mcp): it
// reaps only when the state directory shows a reason, an instance lock
// file that no live process holds or a bundle directory of an instance
// that is neither this one nor a live one, and otherwise returns an
// empty report without spawning the runtime. A crash leaves both, and a
// teardown that could not remove a container keeps its bundle (whose
// instance is gone once the executor closes), so nothing Reap would
// remove is missed; `dsh-sandbox reap` and serve's start call Reap.
func (e *Executor) ReapDead(ctx context.Context) (reap.Report, error) {
	if !e.mayHaveLeftovers() {
		return reap.Report{}, nil
	}
	return e.Reap(ctx)
}

// mayHaveLeftovers reports whether Reap could find anything to remove;
// any doubt (an unreadable directory or marker) answers yes.
func (e *Executor) mayHaveLeftovers() bool {
	dead, release, err := reap.LockDeadInstances(e.instancesDir(), e.instance)
	release()
	if err != nil || len(dead) > 0 {
		return true
	}
	entries, err := os.ReadDir(e.bundlesDir())
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	for _, ent := range entries {
		m, err := readMarker(filepath.Join(e.bundlesDir(), ent.Name()))
		if err != nil {
			return true
		}
		if m.Instance != e.instance && !reap.InstanceKnown(e.instancesDir(), m.Instance) {
			return true
		}
	}
	return false
}

// Reap removes what dead instances of this executor's runtime left
// behind in StateDir: containers labelled owner=dsh-sandbox whose
// instance holds no lock, their bundles, overlay mounts, cgroups and
// spill files in StateDir, and the dead instances' lock files. Live instances, this one included, are
// never touched: this instance's own calls and pool slots are its Run's
// to remove. It keeps going after a failure and returns what it removed
// with every failure joined; a dead instance with a failure keeps its
// cgroups and lock file for a later Reap.
//
// Reap is safe to call while calls of this and other live instances run.
func (e *Executor) Reap(ctx context.Context) (reap.Report, error) {
	var rep reap.Report
	err := e.gate.Hold("oci", func(quiet bool) (err error) {
		rep, err = e.reap(ctx, quiet)
		return err
	})
	return rep, err
}

// reap is Reap with the executor's gate held; quiet means no call of
// this executor runs, and none starts before it returns.
func (e *Executor) reap(ctx context.Context, quiet bool) (reap.Report, error) {
	// The runtime's root is under StateDir: an instance without a lock
	// file there is gone (Close removes it while a call's teardown may
	// have failed), so its objects go at once.
	s := reap.Start("oci", e.instancesDir(), e.instance, nil)
	always := func() bool { return true }
	cs, err := e.rt.list(ctx)
	s.Fail("", err)
	for _, c := range cs {
		inst := c.Annotations[reap.LabelInstance]
		if c.Annotations[reap.LabelOwner] == reap.LabelOwnerValue && s.Leftover(inst, "", always) {
			e.reapContainer(ctx, s, inst, c.ID)
		}
	}
	e.reapBundles(ctx, s, always, quiet && !s.OthersLive())
	// The cgroup hierarchy is shared by every state directory, so only
	// instances this state directory knows to be dead have their
	// cgroups reaped without a bundle: an unknown one may be live.
	s.EachDead(reap.Cgroups, func(inst string) ([]string, error) {
		var removed []string
		var errs []error
		for _, dir := range e.layout.dirsFor("/" + cgroupParent + "/" + inst) {
			if _, err := os.Lstat(dir); err != nil {
				continue
			}
			if err := e.reapCgroup(ctx, dir); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, dir)
		}
		return removed, errors.Join(errs...)
	})
	for _, parent := range e.layout.dirsFor("/" + cgroupParent) {
		removeEmptyParents(parent, cgroupParent)
	}
	return s.Finish()
}

// reapContainer kills and removes container id of instance inst.
func (e *Executor) reapContainer(ctx context.Context, s *reap.Sweep, inst, id string) bool {
	_ = e.rt.kill(ctx, id, syscall.SIGKILL)
	if err := e.rt.remove(ctx, id); err != nil {
		s.Fail(inst, err)
		return false
	}
	s.Removed(reap.Containers, inst, id)
	return true
}

// reapBundles removes the bundles of leftover calls with their
// container, mounts and recorded cgroups. A bundle without a marker, or
// with a torn one (an instance died between making it and writing the
// marker), belongs to no
// known instance: it goes when no instance can be making it right now
// (alone: no other live instance, no call of this one) at once, or after
// unmarkedBundleSettle when this executor's pool may be preparing a
// slot, or else once it is older than unmarkedBundleAge.
func (e *Executor) reapBundles(ctx context.Context, s *reap.Sweep, foreign func() bool, alone bool) {
	entries, err := os.ReadDir(e.bundlesDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		s.Fail("", err)
	}
	for _, ent := range entries {
		dir := filepath.Join(e.bundlesDir(), ent.Name())
		if m, ok := e.leftoverBundle(s, dir, foreign, alone); ok {
			e.reapBundle(ctx, s, dir, m)
		}
	}
}

// leftoverBundle reports whether the bundle in dir is to be removed now
// (reapBundles says when), with its marker; a bundle without a marker,
// or with a torn one, gets a marker that names only the container, after
// the bundle's directory. A marker that cannot be read is a failure of
// the sweep.
func (e *Executor) leftoverBundle(s *reap.Sweep, dir string, foreign func() bool, alone bool) (marker, bool) {
	m, err := readMarker(dir)
	var torn *json.SyntaxError
	switch {
	case err == nil:
		if !s.Leftover(m.Instance, m.Container, foreign) || (m.Runtime != "" && m.Runtime != e.rt.name) {
			return m, false
		}
		return m, true
	case errors.Is(err, os.ErrNotExist), errors.As(err, &torn):
		// No marker, or one torn by a crash while it was written.
		fi, err := os.Lstat(dir)
		if err != nil {
			return m, false // removed since it was listed
		}
		wait := unmarkedBundleAge
		switch {
		case alone && e.warm == nil:
			wait = 0
		case alone:
			wait = unmarkedBundleSettle
		}
		if time.Since(fi.ModTime()) < wait {
			return m, false
		}
		return marker{Container: filepath.Base(dir)}, true
	default:
		s.Fail("", err)
		return m, false
	}
}

// reapBundle removes the leftover bundle in dir, whose marker is m: its
// container, its mounts, its recorded cgroups, the bundle itself and
// then the spill files of its calls. It stops at the first of these
// steps that fails, except for the cgroups.
func (e *Executor) reapBundle(ctx context.Context, s *reap.Sweep, dir string, m marker) {
	if sandbox.ValidCallID(m.Container) {
		if ok, _ := e.rt.exists(m.Container); ok && !e.reapContainer(ctx, s, m.Instance, m.Container) {
			return
		}
	}
	mps, err := unmountAll(dir)
	s.Removed(reap.Mounts, m.Instance, mps...)
	if err != nil {
		s.Fail(m.Instance, err)
		return
	}
	for _, cg := range m.Cgroups {
		if _, err := os.Lstat(cg); err != nil {
			continue
		}
		if err := e.reapCgroup(ctx, cg); err != nil {
			s.Fail(m.Instance, err)
			continue
		}
		s.Removed(reap.Cgroups, m.Instance, cg)
	}
	// A pooled container ran a call of another id (bundleBound).
	calls := []string{m.Container}
	if data, err := os.ReadFile(filepath.Join(dir, bundleBound)); err == nil {
		calls = append(calls, strings.TrimSpace(string(data)))
	}
	if err := (&bundle{dir: dir}).remove(); err != nil {
		s.Fail(m.Instance, err)
		return
	}
	s.Removed(reap.Bundles, m.Instance, dir)
	for _, id := range calls {
		if sandbox.ValidCallID(id) {
			files, err := e.reapSpill(id)
			s.Removed(reap.Files, m.Instance, files...)
			s.Fail(m.Instance, err)
		}
	}
}

// reapSpill removes the spill files the dead call id left in the state
// directory (a call without a session directory spills there, named
// after its id: its container's, or for a container from the warm pool
// the one in the bundle's bundleBound file). No one got the call's result,
// so no one knows their path.
func (e *Executor) reapSpill(id string) ([]string, error) {
	state, err := filepath.EvalSymlinks(e.opts.StateDir)
	if err != nil {
		return nil, nil // no state directory, no spill files
	}
	var removed []string
	var errs []error
	for _, stream := range []string{".stdout", ".stderr"} {
		p := filepath.Join(state, "spill", id+stream)
		switch err := os.Remove(p); {
		case err == nil:
			removed = append(removed, p)
		case !errors.Is(err, os.ErrNotExist):
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}

// reapCgroup removes a cgroup tree, waiting a little for its tasks.
func (e *Executor) reapCgroup(ctx context.Context, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, cgroupReapWait)
	defer cancel()
	return removeCgroupTree(ctx, dir)
}
