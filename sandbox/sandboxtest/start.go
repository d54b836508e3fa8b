package sandboxtest

import (
	"context"
	"sync"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
)

// Outcome is what a Run started by StartRun returned.
type Outcome struct {
	Result *sandbox.Result
	Err    error
}

// StartRun runs req on ex under ctx in the background and returns once
// the command has written its first byte of output: the call is running.
// req.Stdout is replaced by a writer that watches for that byte. The test fails at
// once when the call ends before writing anything. The channel yields the
// call's outcome.
func StartRun(ctx context.Context, t testing.TB, ex sandbox.Executor, req *sandbox.Request) <-chan Outcome {
	t.Helper()
	started := make(chan struct{})
	req.Stdout = &firstWrite{fn: func() { close(started) }}
	done := make(chan Outcome, 1)
	go func() {
		res, err := ex.Run(ctx, req)
		done <- Outcome{res, err}
	}()
	select {
	case <-started:
	case o := <-done:
		t.Fatalf("Run(%q) ended before writing any output: %+v, %v", req.Command, o.Result, o.Err)
	}
	return done
}

// firstWrite calls fn at its first write and discards what it gets.
type firstWrite struct {
	once sync.Once
	fn   func()
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.once.Do(w.fn)
	return len(p), nil
}

// CheckNames returns the names of a doctor's checks, in order.
func CheckNames(checks []doctor.Check) []string {
	names := make([]string, len(checks))
	for i, c := range checks {
		names[i] = c.Name
	}
	return names
}
