// Package reap holds how a backend tells its own objects and live
// instances from leftovers, and what every backend's Reap is made of,
// written once: the labels every container and object carries (Labels),
// the instance lock files of a state directory (LockInstance,
// LockDeadInstances, CheckExecutorIdentity), the calls in progress
// (ActiveCalls), the grace of foreign objects (ForeignLeftoverGrace,
// IdleLongEnough), the per-instance state directories of calls, and the
// collection of what was removed and what failed into one Report.
//
// A backend's Reap is a short composition: Start a Sweep, ask Leftover
// for each object it lists (containers, bundles, snapshots), remove those
// and report them with Removed or Fail, let EachCall and EachDead walk its
// per-instance state, and Finish. A warm pool's slot is an object like a
// call's: it carries the same labels and its id must be in the backend's
// set of calls in progress for as long as the slot exists, so that its
// own instance's Reap leaves it alone.
//
// It imports only the standard library, sandbox and hostpath (to resolve
// a state directory); the driver and the backends import it.
package reap

import (
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Kind is a kind of removed object: a list of Report.
type Kind int

// The kinds, one per list of Report (see there what each
// entry is).
const (
	Containers Kind = iota
	Bundles
	Snapshots
	Images
	Mounts
	Cgroups
	Files
)

// Sweep is one Reap over one state directory. It holds the locks of the
// dead instances it found from Start to Finish, so none of them comes
// back meanwhile. It is not safe for concurrent use.
type Sweep struct {
	dir, self string
	active    func(call string) bool
	dead      map[string]*os.File
	release   func()

	rep     Report
	reaped  map[string]bool // instances something was removed of
	failed  map[string]bool // dead instances with leftovers that remain
	errs    []error
	backend string
}

// Start begins a Reap of backend (its name, for errors) by the instance
// self on the instance directory dir (the lock files, see
// LockInstance): it takes the locks of every dead instance there.
// active reports whether a call of self is in progress (or a slot of self
// is in a pool); nil means every call of self is, so that nothing of self
// is ever reaped. A failure to read dir is recorded, not fatal: Reap goes
// on with what it can tell.
func Start(backend, dir, self string, active func(call string) bool) *Sweep {
	if active == nil {
		active = func(string) bool { return true }
	}
	dead, release, err := LockDeadInstances(dir, self)
	s := &Sweep{dir: dir, self: self, active: active, dead: dead, release: release,
		reaped: map[string]bool{}, failed: map[string]bool{}, backend: backend}
	if err != nil {
		s.Fail("", err)
	}
	return s
}

// Dead reports whether inst is a dead instance of the state directory
// (its lock file exists and no process holds it).
func (s *Sweep) Dead(inst string) bool {
	_, ok := s.dead[inst]
	return ok
}

// OthersLive reports whether an instance other than this one is live on
// the state directory: its lock file exists and Start did not find it
// dead (a lock file made since Start is a new live instance). Any doubt
// (an unreadable directory) answers yes.
func (s *Sweep) OthersLive() bool {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return !errors.Is(err, os.ErrNotExist)
	}
	for _, ent := range ents {
		inst, ok := strings.CutSuffix(ent.Name(), ".lock")
		if ok && inst != s.self && !s.Dead(inst) {
			return true
		}
	}
	return false
}

// Leftover reports whether an object of instance inst made for call may
// be removed:
//
//   - of this instance: when call is not in progress;
//   - of a dead instance: always;
//   - of a live instance of this state directory: never;
//   - of an instance unknown here (no lock file: a service on another
//     state directory, one long gone, or an object made before the
//     instance was recorded): when foreign reports true; nil means never.
//     A backend whose objects live only under its state directory may
//     say always; one on a shared daemon checks that the object is not
//     running and has been idle for ForeignLeftoverGrace.
func (s *Sweep) Leftover(inst, call string, foreign func() bool) bool {
	switch {
	case inst == s.self:
		return !s.active(call)
	case s.Dead(inst):
		return true
	case InstanceKnown(s.dir, inst):
		return false
	default:
		return foreign != nil && foreign()
	}
}

// Removed records ids of kind removed, made by instance inst ("" when
// unknown).
func (s *Sweep) Removed(kind Kind, inst string, ids ...string) {
	if len(ids) == 0 {
		return
	}
	l := s.list(kind)
	*l = append(*l, ids...)
	if inst != "" && inst != s.self {
		s.reaped[inst] = true
	}
}

// Fail records err; when inst ("" for none) is a dead instance, its
// leftovers that depend on the failed object (its mounts, cgroups, lock
// file) are kept for a later Reap.
func (s *Sweep) Fail(inst string, err error) {
	if err == nil {
		return
	}
	s.errs = append(s.errs, err)
	if inst != "" {
		s.failed[inst] = true
	}
}

// FailAll records err, a failure that leaves what every dead instance
// left unknown (a listing failed): all of it is kept for a later Reap.
func (s *Sweep) FailAll(err error) {
	s.Fail("", err)
	for inst := range s.dead {
		s.failed[inst] = true
	}
}

// EachDead calls remove for every dead instance without a failure so far,
// in order, and records what it removed as kind, or its failure.
func (s *Sweep) EachDead(kind Kind, remove func(inst string) ([]string, error)) {
	for _, inst := range s.deadInstances() {
		if s.failed[inst] {
			continue
		}
		ids, err := remove(inst)
		s.Removed(kind, inst, ids...)
		s.Fail(inst, err)
	}
}

// EachCall removes per-call state kept per instance (staging mounts,
// FIFOs): it calls remove for every dead instance without a failure so
// far with a keep that keeps nothing, then for this instance with a keep
// that keeps the calls in progress, and records what remove removed as
// kind, or its failure. remove must treat a missing directory as nothing
// to do.
func (s *Sweep) EachCall(kind Kind, remove func(inst string, keep func(call string) bool) ([]string, error)) {
	none := func(string) bool { return false }
	s.EachDead(kind, func(inst string) ([]string, error) { return remove(inst, none) })
	ids, err := remove(s.self, s.active)
	s.Removed(kind, s.self, ids...)
	s.Fail("", err)
}

func (s *Sweep) deadInstances() []string {
	insts := make([]string, 0, len(s.dead))
	for inst := range s.dead {
		insts = append(insts, inst)
	}
	sort.Strings(insts)
	return insts
}

func (s *Sweep) list(k Kind) *[]string {
	switch k {
	case Containers:
		return &s.rep.Containers
	case Bundles:
		return &s.rep.Bundles
	case Snapshots:
		return &s.rep.Snapshots
	case Images:
		return &s.rep.Images
	case Mounts:
		return &s.rep.Mounts
	case Cgroups:
		return &s.rep.Cgroups
	default:
		return &s.rep.Files
	}
}

// Finish removes the lock file of every dead instance that left nothing
// behind this time (one with a failure keeps it, so the next Reap knows
// it is dead), releases the locks, and returns the report, every list
// sorted, with every failure joined into one sandbox.ErrInternal error
// that still wraps each failure's own class.
func (s *Sweep) Finish() (Report, error) {
	defer s.release()
	for _, inst := range s.deadInstances() {
		if s.failed[inst] {
			continue
		}
		if err := os.Remove(filepath.Join(s.dir, inst+".lock")); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.Fail(inst, err)
			continue
		}
		s.reaped[inst] = true
	}
	for inst := range s.reaped {
		s.rep.Instances = append(s.rep.Instances, inst)
	}
	rep := s.rep
	for _, l := range []*[]string{&rep.Instances, &rep.Containers, &rep.Bundles, &rep.Snapshots, &rep.Images, &rep.Mounts, &rep.Cgroups, &rep.Files} {
		sort.Strings(*l)
	}
	if len(s.errs) > 0 {
		return rep, sandbox.Errorf(sandbox.ErrInternal, "%s: reap: %w", s.backend, errors.Join(s.errs...))
	}
	return rep, nil
}
