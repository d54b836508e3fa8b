package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// unmarkedBundleAge is how old a bundle directory without a marker must
// be before Reap removes it. The marker is written right after the
// directory is made, so only a crash in between leaves one without; a
// young one may belong to a call being set up right now.
const unmarkedBundleAge = 10 * time.Minute

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
func (e *Executor) ReapDead(ctx context.Context) (sandbox.ReapReport, error) {
	if !e.mayHaveLeftovers() {
		return sandbox.ReapReport{}, nil
	}
	return e.Reap(ctx)
}

// mayHaveLeftovers reports whether Reap could find anything to remove;
// any doubt (an unreadable directory or marker) answers yes.
func (e *Executor) mayHaveLeftovers() bool {
	dead, release, err := sandbox.LockDeadInstances(e.instancesDir(), e.instance)
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
		if m.Instance != e.instance && !sandbox.InstanceKnown(e.instancesDir(), m.Instance) {
			return true
		}
	}
	return false
}

// Reap removes what dead instances of this executor's runtime left
// behind in StateDir: containers labelled owner=dsh-sandbox whose
// instance holds no lock, their bundles, overlay mounts and cgroups, and
// the dead instances' lock files. Live instances, this one included, are
// never touched. It keeps going after a failure and returns what it
// removed with every failure joined.
//
// Reap is safe to call while calls of this and other live instances run.
func (e *Executor) Reap(ctx context.Context) (sandbox.ReapReport, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.closed {
		return sandbox.ReapReport{}, sandbox.Errorf(sandbox.ErrUnavailable, "oci: executor is closed")
	}
	var rep sandbox.ReapReport
	var errs []error
	dead, release, err := sandbox.LockDeadInstances(e.instancesDir(), e.instance)
	defer release()
	if err != nil {
		errs = append(errs, err)
	}
	live := func(inst string) bool {
		if inst == e.instance {
			return true
		}
		_, isDead := dead[inst]
		if isDead {
			return false
		}
		// No lock file at all: the instance is gone (Close removes
		// it, a crash leaves it, so this is an instance that closed
		// while a call's teardown failed).
		return sandbox.InstanceKnown(e.instancesDir(), inst)
	}
	reaped := map[string]bool{}

	// Containers the runtime knows.
	cs, err := e.rt.list(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, c := range cs {
		if c.Annotations[sandbox.LabelOwner] != sandbox.LabelOwnerValue || live(c.Annotations[sandbox.LabelInstance]) {
			continue
		}
		_ = e.rt.kill(ctx, c.ID, syscall.SIGKILL)
		if err := e.rt.remove(ctx, c.ID); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Containers = append(rep.Containers, c.ID)
		reaped[c.Annotations[sandbox.LabelInstance]] = true
	}

	// Bundles, with their mounts and recorded cgroups.
	entries, err := os.ReadDir(e.bundlesDir())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, ent := range entries {
		dir := filepath.Join(e.bundlesDir(), ent.Name())
		m, err := readMarker(dir)
		switch {
		case err == nil:
			if live(m.Instance) || (m.Runtime != "" && m.Runtime != e.rt.name) {
				continue
			}
		case errors.Is(err, os.ErrNotExist):
			fi, serr := os.Lstat(dir)
			if serr != nil || time.Since(fi.ModTime()) < unmarkedBundleAge {
				continue
			}
			m = marker{Container: ent.Name()}
		default:
			errs = append(errs, err)
			continue
		}
		if sandbox.ValidCallID(m.Container) {
			ok, _ := e.rt.exists(m.Container)
			if ok {
				_ = e.rt.kill(ctx, m.Container, syscall.SIGKILL)
				if err := e.rt.remove(ctx, m.Container); err != nil {
					errs = append(errs, err)
					continue
				}
				rep.Containers = append(rep.Containers, m.Container)
			}
		}
		mps, err := unmountAll(dir)
		rep.Mounts = append(rep.Mounts, mps...)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, cg := range m.Cgroups {
			if _, err := os.Lstat(cg); err == nil {
				if err := e.reapCgroup(ctx, cg); err != nil {
					errs = append(errs, err)
				} else {
					rep.Cgroups = append(rep.Cgroups, cg)
				}
			}
		}
		b := &bundle{dir: dir}
		if err := b.remove(); err != nil {
			errs = append(errs, err)
			continue
		}
		rep.Bundles = append(rep.Bundles, dir)
		if m.Instance != "" {
			reaped[m.Instance] = true
		}
	}

	// Cgroups of dead instances that no bundle recorded. The cgroup
	// hierarchy is shared by every state directory on the host, so only
	// instances this state directory knows to be dead (an unheld lock
	// file) are reaped here: an unknown instance may be a live one of
	// another state directory.
	parents := e.layout.dirsFor("/" + cgroupParent)
	seen := map[string]bool{}
	for _, parent := range parents {
		if seen[parent] {
			continue
		}
		seen[parent] = true
		insts, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, inst := range insts {
			if _, isDead := dead[inst.Name()]; !inst.IsDir() || !isDead {
				continue
			}
			dir := filepath.Join(parent, inst.Name())
			if err := e.reapCgroup(ctx, dir); err != nil {
				errs = append(errs, err)
				continue
			}
			rep.Cgroups = append(rep.Cgroups, dir)
			reaped[inst.Name()] = true
		}
		removeEmptyParents(parent, cgroupParent)
	}

	// Lock files of dead instances.
	for inst := range dead {
		if err := os.Remove(filepath.Join(e.instancesDir(), inst+".lock")); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		reaped[inst] = true
	}
	for inst := range reaped {
		if inst != "" {
			rep.Instances = append(rep.Instances, inst)
		}
	}
	for _, l := range [][]string{rep.Instances, rep.Containers, rep.Bundles, rep.Mounts, rep.Cgroups} {
		sort.Strings(l)
	}
	if len(errs) > 0 {
		return rep, sandbox.Errorf(sandbox.ErrInternal, "oci: reap: %w", errors.Join(errs...))
	}
	return rep, nil
}

// reapCgroup removes a cgroup tree, waiting a little for its tasks.
func (e *Executor) reapCgroup(ctx context.Context, dir string) error {
	ctx, cancel := context.WithTimeout(ctx, cgroupReapWait)
	defer cancel()
	return removeCgroupTree(ctx, dir)
}
