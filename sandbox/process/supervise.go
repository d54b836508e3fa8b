package process

import (
	"context"
	"syscall"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Supervise watches a running container until done is closed and stops it
// when the call times out or ctx ends, the way os/exec's Cancel and
// WaitDelay do: signal(SIGTERM) to the whole container, wait grace, then
// signal(SIGKILL), repeated every grace until done closes (a first KILL
// can race with a fork or fail transiently).
//
// timeout ≤ 0 means no timeout (background jobs); grace ≤ 0 means
// DefaultKillGrace. signal must deliver the signal to every process of the
// container; its errors are ignored because the container may already be
// gone. Supervise always blocks until done is closed, so that the caller
// never tears down a container that still runs.
//
// It reports timedOut when the timeout fired first and aborted when ctx
// ended first; never both. When done closes before either, both are false
// and no signal is sent.
func Supervise(ctx context.Context, timeout, grace time.Duration, done <-chan struct{}, signal func(sig syscall.Signal) error) (timedOut, aborted bool) {
	if grace <= 0 {
		grace = sandbox.DefaultKillGrace
	}
	var expired <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expired = t.C
	}

	select {
	case <-done:
		return false, false
	case <-expired:
		timedOut = true
	case <-ctx.Done():
		aborted = true
	}
	// The command may have finished in the same instant; then it was not
	// cut short and gets no signal.
	select {
	case <-done:
		return false, false
	default:
	}

	_ = signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
		return timedOut, aborted
	case <-t.C:
	}
	for {
		_ = signal(syscall.SIGKILL)
		t.Reset(grace)
		select {
		case <-done:
			return timedOut, aborted
		case <-t.C:
		}
	}
}
