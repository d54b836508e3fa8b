package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// leftoverCases check that calls leave nothing behind, whatever way they
// end. They run last.
func leftoverCases() []testCase {
	return []testCase{
		{name: "leftovers-after-200-calls", run: testLeftoversAfter200Calls},
		{name: "leftovers-final", run: func(t *testing.T, s *suite) { s.checkLeftovers(t) }},
	}
}

// checkLeftovers fails the case when the backend reports objects of
// calls that have returned.
func (s *suite) checkLeftovers(t *testing.T) {
	t.Helper()
	if s.cfg.Leftovers == nil {
		t.Logf("Subject.Leftovers is nil: leftovers not checked")
		return
	}
	if left := s.cfg.Leftovers(t); len(left) > 0 {
		t.Errorf("the backend left %d objects behind:\n  %s", len(left), strings.Join(left, "\n  "))
	}
}

// mixedCall is one kind of call in the leftover stress run.
type mixedCall struct {
	kind  string
	setup func(req *sandbox.Request, cancel context.CancelFunc)
	check func(res *sandbox.Result, err error) error
}

// mixedCalls are the kinds of call the stress run cycles through: plain
// successes, failures, timeouts, cancellations, invalid requests, spilled
// output, stdin and self-inflicted signals.
func mixedCalls() []mixedCall {
	exit := func(code int) func(*sandbox.Result, error) error {
		return func(res *sandbox.Result, err error) error {
			if err != nil || sandbox.ExitCode(res, nil) != code || res.TimedOut || res.Aborted {
				return fmt.Errorf("got %s, err %v; want exit status %d", describe(res), err, code)
			}
			return nil
		}
	}
	return []mixedCall{
		{kind: "true", check: exit(0)},
		{kind: "exit-1", setup: func(r *sandbox.Request, _ context.CancelFunc) { r.Command = "exit 1" }, check: exit(1)},
		{kind: "timeout", setup: func(r *sandbox.Request, _ context.CancelFunc) {
			r.Command, r.TimeoutMs = "sleep 30", 300
		}, check: func(res *sandbox.Result, err error) error {
			if err != nil || !res.TimedOut {
				return fmt.Errorf("got %s, err %v; want timed out", describe(res), err)
			}
			return nil
		}},
		{kind: "cancel", setup: func(r *sandbox.Request, cancel context.CancelFunc) {
			r.Command = "echo go; sleep 30"
			r.Stdout = newWatchWriter("go", cancel)
		}, check: func(res *sandbox.Result, err error) error {
			if err != nil || !res.Aborted {
				return fmt.Errorf("got %s, err %v; want aborted", describe(res), err)
			}
			return nil
		}},
		{kind: "invalid", setup: func(r *sandbox.Request, _ context.CancelFunc) { r.TimeoutMs = -5 }, check: func(_ *sandbox.Result, err error) error {
			if !errors.Is(err, sandbox.ErrInvalid) {
				return fmt.Errorf("err %v, want ErrInvalid", err)
			}
			return nil
		}},
		{kind: "spill", setup: func(r *sandbox.Request, _ context.CancelFunc) {
			r.Command, r.StdoutMaxBytes = "seq 1 2000", 100
		}, check: func(res *sandbox.Result, err error) error {
			if err != nil || res.Stdout.SpillPath == "" || res.Stdout.DroppedBytes != int64(len(seqOutput(2000))-100) {
				return fmt.Errorf("got %s, err %v; want a spilled stdout", describe(res), err)
			}
			return nil
		}},
		{kind: "stdin", setup: func(r *sandbox.Request, _ context.CancelFunc) {
			r.Command, r.Stdin = "cat", []byte("in\n")
		}, check: func(res *sandbox.Result, err error) error {
			if err != nil || res.Stdout.Text != "in\n" {
				return fmt.Errorf("got %s, err %v; want stdin echoed", describe(res), err)
			}
			return nil
		}},
		{kind: "signal", setup: func(r *sandbox.Request, _ context.CancelFunc) { r.Command = "kill -9 $$" }, check: exit(137)},
		{kind: "stderr-exit-2", setup: func(r *sandbox.Request, _ context.CancelFunc) { r.Command = "echo oops >&2; exit 2" }, check: exit(2)},
		{kind: "true-no-session", setup: func(r *sandbox.Request, _ context.CancelFunc) {
			r.Session, r.DSHEnv = sandbox.Session{}, nil
		}, check: exit(0)},
	}
}

// testLeftoversAfter200Calls runs 200 calls of every kind, four at a
// time, then asserts the backend left nothing behind.
func testLeftoversAfter200Calls(t *testing.T, s *suite) {
	const calls, workers = 200, 4
	fx := newFixture(t)
	kinds := mixedCalls()
	var (
		mu       sync.Mutex
		failures = map[string][]string{}
	)
	next := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := range next {
				k := kinds[i%len(kinds)]
				ctx, cancel := context.WithCancel(t.Context())
				req := s.request(fx, "true")
				req.TimeoutMs = 30_000
				if k.setup != nil {
					k.setup(req, cancel)
				}
				res, err := s.runCtx(ctx, req)
				cancel()
				if ferr := k.check(res, err); ferr != nil {
					mu.Lock()
					failures[k.kind] = append(failures[k.kind], fmt.Sprintf("call %d: %v", i, ferr))
					mu.Unlock()
				}
			}
		})
	}
	for i := range calls {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, kind := range slices.Sorted(maps.Keys(failures)) {
		f := failures[kind]
		t.Errorf("%d of %d %q calls failed; first: %s", len(f), calls/len(kinds), kind, f[0])
	}
	s.checkLeftovers(t)
}
