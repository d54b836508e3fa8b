package driver

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Cleanup is a releasable stack of undo steps, in the style of gVisor's
// runsc/cleanup: a function that builds something pushes the undo of each
// finished step, defers Clean, and calls Release once the whole thing has
// succeeded so that ownership of the undo passes to its caller. Run keeps
// one per call and cleans it on every path.
//
// The zero value is an empty stack. A Cleanup is not safe for concurrent
// use.
type Cleanup struct {
	steps []cleanupStep
}

type cleanupStep struct {
	name string
	fn   func(ctx context.Context) error
}

// Add pushes an undo step; steps run in reverse order of addition.
func (c *Cleanup) Add(name string, fn func(ctx context.Context) error) {
	c.steps = append(c.steps, cleanupStep{name: name, fn: fn})
}

// Clean runs every step, last added first, even when earlier ones fail,
// and empties the stack. The error joins every failure, each prefixed
// with the step's name.
func (c *Cleanup) Clean(ctx context.Context) error {
	var errs []error
	for i := len(c.steps) - 1; i >= 0; i-- {
		s := c.steps[i]
		if err := s.fn(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		}
	}
	c.steps = nil
	return errors.Join(errs...)
}

// Release empties the stack and returns a Cleanup owning its steps, for
// the caller to run later.
func (c *Cleanup) Release() *Cleanup {
	r := &Cleanup{steps: c.steps}
	c.steps = nil
	return r
}

// Merge moves the steps of o on top of c's, leaving o empty.
func (c *Cleanup) Merge(o *Cleanup) {
	c.steps = append(c.steps, o.steps...)
	o.steps = nil
}

// Drain waits for the copies of a process's output to end; when they
// have not after within, it calls cut (which closes what they read, so
// that they return) and waits for them. It reports whether they ended on
// their own.
func Drain(copies *sync.WaitGroup, within time.Duration, cut func()) bool {
	drained := make(chan struct{})
	go func() {
		copies.Wait()
		close(drained)
	}()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-drained:
		return true
	case <-t.C:
		cut()
		<-drained
		return false
	}
}
