package api

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// limiter admits at most cap(slots) concurrent executions, foreground
// calls and background jobs alike, and lets at most maxQueue more wait;
// beyond that admission fails at once with ErrOverloaded. It is safe for
// concurrent use.
type limiter struct {
	slots    chan struct{}
	maxQueue int64
	queued   atomic.Int64
	running  atomic.Int64
}

func newLimiter(maxConcurrent, maxQueue int) *limiter {
	return &limiter{slots: make(chan struct{}, maxConcurrent), maxQueue: int64(maxQueue)}
}

// ticket is an admitted execution: it holds a slot, or a place in the
// queue until wait gets it one. Exactly one of wait's failure, release or
// cancel ends it.
type ticket struct {
	l      *limiter
	mu     sync.Mutex
	queued bool // holds a queue place
	slot   bool // holds a slot
}

// admit takes a slot when one is free, else a place in the queue when
// there is room, else fails with ErrOverloaded. It never blocks.
func (l *limiter) admit() (*ticket, error) {
	select {
	case l.slots <- struct{}{}:
		l.running.Add(1)
		return &ticket{l: l, slot: true}, nil
	default:
	}
	if l.queued.Add(1) > l.maxQueue {
		l.queued.Add(-1)
		return nil, types.ErrOverloaded
	}
	return &ticket{l: l, queued: true}, nil
}

// wait blocks until the ticket holds a slot or ctx ends; then the queue
// place is given up and the error wraps sandbox.ErrUnavailable.
func (t *ticket) wait(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.slot {
		return nil
	}
	if !t.queued {
		return sandbox.Errorf(sandbox.ErrInternal, "execution slot: ticket already ended")
	}
	t.queued = false
	defer t.l.queued.Add(-1)
	select {
	case t.l.slots <- struct{}{}:
		t.l.running.Add(1)
		t.slot = true
		return nil
	case <-ctx.Done():
		return sandbox.Errorf(sandbox.ErrUnavailable, "waiting for an execution slot: %w", ctx.Err())
	}
}

// release gives up whatever the ticket holds; it may be called more than
// once.
func (t *ticket) release() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.slot {
		t.slot = false
		t.l.running.Add(-1)
		<-t.l.slots
	}
	if t.queued {
		t.queued = false
		t.l.queued.Add(-1)
	}
}

// acquire takes a slot, waiting in the queue when there is room in it.
// The caller must release the ticket after a nil error.
func (l *limiter) acquire(ctx context.Context) (*ticket, error) {
	t, err := l.admit()
	if err != nil {
		return nil, err
	}
	if err := t.wait(ctx); err != nil {
		return nil, err
	}
	return t, nil
}
