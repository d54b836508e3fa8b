package api

import (
	"context"
	"sync/atomic"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// limiter admits at most cap(slots) concurrent executions and lets at most
// maxQueue more wait; beyond that acquire fails at once with ErrOverloaded.
// It is safe for concurrent use.
type limiter struct {
	slots    chan struct{}
	maxQueue int64
	queued   atomic.Int64
	running  atomic.Int64
}

func newLimiter(maxConcurrent, maxQueue int) *limiter {
	return &limiter{slots: make(chan struct{}, maxConcurrent), maxQueue: int64(maxQueue)}
}

// acquire takes a slot, waiting in the queue when there is room in it.
// The caller must call release after a nil error.
func (l *limiter) acquire(ctx context.Context) error {
	select {
	case l.slots <- struct{}{}:
		l.running.Add(1)
		return nil
	default:
	}
	if l.queued.Add(1) > l.maxQueue {
		l.queued.Add(-1)
		return ErrOverloaded
	}
	defer l.queued.Add(-1)
	select {
	case l.slots <- struct{}{}:
		l.running.Add(1)
		return nil
	case <-ctx.Done():
		return sandbox.Errorf(sandbox.ErrUnavailable, "waiting for an execution slot: %w", ctx.Err())
	}
}

func (l *limiter) release() {
	l.running.Add(-1)
	<-l.slots
}
