package driver

import (
	"context"
	"sync"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Gate admits an executor's calls until the executor is closed: a call
// holds it for reading while it runs (RunGated), Close waits for the
// calls and closes it for good. The zero value is open. A Gate is safe
// for concurrent use; it must not be copied after first use.
type Gate struct {
	mu     sync.RWMutex
	closed bool
}

// RunGated is Run of req on b while g is open, holding g for reading
// for the whole call. Once g is closed it fails with
// sandbox.ErrUnavailable ("<backend>: executor is closed").
func RunGated[S any](ctx context.Context, g *Gate, b Backend[S], req *sandbox.Request) (*sandbox.Result, error) {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return nil, closedError(b.Profile().Name)
	}
	return Run(ctx, b, req)
}

// Hold runs f while g is open and returns its error; once g is closed
// it fails as RunGated does, naming backend. quiet tells f that no call
// runs and none starts before f returns (g is held for writing); when
// calls run, f runs beside them (g held for reading).
func (g *Gate) Hold(backend string, f func(quiet bool) error) error {
	quiet := g.mu.TryLock()
	if quiet {
		defer g.mu.Unlock()
	} else {
		g.mu.RLock()
		defer g.mu.RUnlock()
	}
	if g.closed {
		return closedError(backend)
	}
	return f(quiet)
}

// Close waits for the calls running through g, closes it and runs
// release, returning its error. Later calls return nil and run nothing,
// so that an executor's Close is idempotent.
func (g *Gate) Close(release func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	return release()
}

func closedError(backend string) error {
	return sandbox.Errorf(sandbox.ErrUnavailable, "%s: executor is closed", backend)
}
