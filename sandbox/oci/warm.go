package oci

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sync"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/pool"
)

// maxTemplates bounds the templates an executor remembers (one per pool
// key); past it they are forgotten all at once, and the next call of
// each key prepares its successor again.
const maxTemplates = 4096

// coldKey is the pool key under which the teardowns of calls that did
// not come from the pool are counted.
const coldKey = "cold"

// warmSlot is a slot in the pool: prepared by driver.PrepareSlot for a
// call like the one its key names, with the stack that undoes it.
type warmSlot struct {
	s    *slot // nil for the teardown of a cold call handed to the pool
	undo *driver.Cleanup
}

func (w *warmSlot) Alive() bool { return w.s != nil && w.s.alive() }

func (w *warmSlot) Close(ctx context.Context) error { return w.undo.Clean(ctx) }

// warm is an executor's pool and the templates its slots are prepared
// from.
type warm struct {
	pool *pool.Pool[*warmSlot]

	mu        sync.Mutex
	templates map[string]*sandbox.Request
}

// newWarm starts e's pool.
func (e *Executor) newWarm(opts pool.Options) *warm {
	w := &warm{templates: map[string]*sandbox.Request{}}
	w.pool = pool.New(func(ctx context.Context, key string) (*warmSlot, error) {
		w.mu.Lock()
		req := w.templates[key]
		w.mu.Unlock()
		if req == nil {
			return nil, sandbox.Errorf(sandbox.ErrInternal, "oci: pool: no template for key %s", key)
		}
		s, undo, err := driver.PrepareSlot(ctx, (*runner)(e), req)
		if err != nil {
			return nil, err
		}
		return &warmSlot{s: s.(*slot), undo: undo}, nil
	}, opts)
	return w
}

// poolKey is the key of req's slots: a digest of everything a slot
// fixes — the policy (image, runtime, limits, mounts, identity), the
// session (its mount set and identity), the labels, the working
// directory the container starts in — or "" when req's calls never come
// from the pool: no pool, runsc (no stub), a terminal, an egress network
// (its proxy and record are the call's own). late says the session
// directory is mounted at Bind (late.go): the key then names the
// workspace but no session, and the slot is prepared from
// withoutTranscript(req).
func (e *Executor) poolKey(req *sandbox.Request, uid, gid uint32) (key string, late bool) {
	if e.warm == nil || !usesStub(e.rt.name) || req.Terminal != nil || req.Policy.Network == policy.NetworkAllowlist {
		return "", false
	}
	late = lateTranscript(req, uid, gid)
	fixed := req
	if late {
		fixed = withoutTranscript(req)
	}
	data, err := json.Marshal(struct {
		Runtime string            `json:"runtime"`
		Policy  sandbox.Policy    `json:"policy"`
		Session sandbox.Session   `json:"session"`
		Late    bool              `json:"late"`
		Labels  map[string]string `json:"labels"`
		Workdir string            `json:"workdir"`
	}{e.rt.name, fixed.Policy, fixed.Session, late, fixed.Labels, fixed.Workdir})
	if err != nil {
		return "", false
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16]), late
}

// template is what a slot for calls like req is prepared from: req
// without anything of the call itself, and without its session when the
// session directory is mounted at Bind.
func template(req *sandbox.Request, late bool) *sandbox.Request {
	if late {
		req = withoutTranscript(req)
	}
	return &sandbox.Request{
		Command: "true",
		Workdir: req.Workdir,
		Session: req.Session,
		Policy:  req.Policy,
		Labels:  req.Labels,
	}
}

// Take hands out a slot prepared for calls like call's, waiting for one
// whose prepare already runs (pool.Pool.Await).
func (r *runner) Take(ctx context.Context, call *driver.Running, pl *plan) (driver.Slot, *driver.Cleanup, string) {
	e := (*Executor)(r)
	key := pl.poolKey
	if key == "" {
		return nil, nil, ""
	}
	w, ok := e.warm.pool.Await(ctx, key)
	if !ok {
		return nil, nil, sandbox.PoolMiss
	}
	return w.s, w.undo, sandbox.PoolHit
}

// Started prepares the slot of the session's next call while this one
// runs, once it has run for the pool's RefillDelay; Release starts it
// at once when the call ends sooner.
func (r *runner) Started(call *driver.Running, pl *plan) {
	e := (*Executor)(r)
	key := pl.poolKey
	if key == "" {
		return
	}
	w := e.warm
	w.mu.Lock()
	if _, ok := w.templates[key]; !ok && len(w.templates) >= maxTemplates {
		w.templates = map[string]*sandbox.Request{}
	}
	w.templates[key] = template(call.Request, pl.late)
	w.mu.Unlock()
	pl.refill = w.pool.RefillLater(key)
}

// Release tears the call down after Run returned, in the pool's
// background, unless its egress record may still change its result.
func (r *runner) Release(call *driver.Running, pl *plan, teardown *driver.Cleanup) bool {
	e := (*Executor)(r)
	if pl.refill != nil {
		pl.refill()
	}
	if e.warm == nil || call.Request.Policy.Network == policy.NetworkAllowlist {
		call.Cleanup.Merge(teardown)
		return false
	}
	key := pl.poolKey
	if key == "" {
		key = coldKey
	}
	e.warm.pool.Release(key, &warmSlot{undo: teardown})
	return true
}
