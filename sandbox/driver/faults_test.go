package driver_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// faulty is the toy backend with a failure injected at one step (create,
// start, wait, or a failing cleanup step) or a cancel between create and
// start. Each Prepare and Bind pushes an undo step that records its name,
// so a test sees which undo steps ran, in which order.
type faulty struct {
	toy
	fail   string // "create", "start", "wait", "undo", "cancel" or ""
	cancel context.CancelFunc

	mu   sync.Mutex
	undo []string
}

func (b *faulty) record(step string) func(context.Context) error {
	return func(context.Context) error {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.undo = append(b.undo, step)
		if step == "container" && b.fail == "undo" {
			return errors.New("injected undo failure")
		}
		return nil
	}
}

func (b *faulty) Prepare(ctx context.Context, call *driver.Running, s struct{}) (driver.Slot, error) {
	call.Cleanup.Add("created", b.record("created"))
	if b.fail == "create" {
		return nil, sandbox.Errorf(sandbox.ErrInternal, "faulty: injected create failure")
	}
	c, err := b.toy.Prepare(ctx, call, s)
	if err != nil {
		return nil, err
	}
	call.Cleanup.Add("container", b.record("container"))
	if b.fail == "cancel" {
		b.cancel()
	}
	return &faultyContainer{c.(*toyProcess), b, call}, nil
}

type faultyContainer struct {
	*toyProcess
	b    *faulty
	call *driver.Running
}

func (c *faultyContainer) Bind(ctx context.Context, call *driver.Running, s driver.Stdio) (driver.Process, error) {
	if c.b.fail == "start" {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "faulty: injected start failure")
	}
	p, err := c.toyProcess.Bind(ctx, call, s)
	if err != nil {
		return nil, err
	}
	c.call.Cleanup.Add("started", c.b.record("started"))
	return &faultyProcess{p.(*toyProcess), c.b}, nil
}

type faultyProcess struct {
	*toyProcess
	b *faulty
}

func (p *faultyProcess) Wait(ctx context.Context, stopped bool) (driver.Exit, error) {
	exit, err := p.toyProcess.Wait(ctx, stopped)
	if p.b.fail == "wait" {
		return driver.Exit{}, sandbox.Errorf(sandbox.ErrUnavailable, "faulty: injected wait failure")
	}
	return exit, err
}

// TestRunCleansUpOnEveryPath: whatever step fails, driver.Run runs every
// undo step that was pushed, last first, and reports the failure with
// its class; a failing undo step leaves a successful call's result alone
// but still runs the steps under it; a cancel between create and start
// is "not started".
func TestRunCleansUpOnEveryPath(t *testing.T) {
	for _, tt := range []struct {
		fail     string
		wantErr  error // nil: the call succeeds
		wantUndo []string
	}{
		{"", nil, []string{"started", "container", "created"}},
		{"create", sandbox.ErrInternal, []string{"created"}},
		{"start", sandbox.ErrUnavailable, []string{"container", "created"}},
		{"wait", sandbox.ErrUnavailable, []string{"started", "container", "created"}},
		{"undo", nil, []string{"started", "container", "created"}},
		{"cancel", sandbox.ErrUnavailable, []string{"container", "created"}},
	} {
		t.Run("fail="+tt.fail, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			b := &faulty{toy: toy{stateDir: t.TempDir()}, fail: tt.fail, cancel: cancel}
			req := &sandbox.Request{Command: "echo ran", Session: sandbox.Session{Cwd: t.TempDir()}, Policy: toyPolicy()}
			res, err := driver.Run(ctx, b, req)
			switch {
			case tt.wantErr == nil && (err != nil || res == nil || res.Stdout.Text != "ran\n"):
				t.Errorf("Run() = %+v, %v; want the call's result", res, err)
			case tt.wantErr != nil && (!errors.Is(err, tt.wantErr) || res != nil):
				t.Errorf("Run() = %+v, %v; want nil and an error wrapping %v", res, err, tt.wantErr)
			}
			b.mu.Lock()
			defer b.mu.Unlock()
			if !slices.Equal(b.undo, tt.wantUndo) {
				t.Errorf("undo steps run = %q, want %q", b.undo, tt.wantUndo)
			}
		})
	}
}
