package api

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// stuckBody is a request body whose client sends nothing: Read blocks
// until interrupt, as a read deadline would end it.
type stuckBody struct {
	reading chan struct{}
	stop    chan struct{}
	once    sync.Once
}

func (b *stuckBody) Read([]byte) (int, error) {
	b.once.Do(func() { close(b.reading) })
	<-b.stop
	return 0, os.ErrDeadlineExceeded
}

type writeResult struct {
	written int64
	closed  bool
	err     error
}

func waitWrite(t *testing.T, what string, ch <-chan writeResult) writeResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(30 * time.Second):
		t.Fatalf("%s is still blocked", what)
		return writeResult{}
	}
}

// TestJobStdinStuckWriter: a writer whose body sends nothing holds the
// turn, but a second writer gives up when its request does, and the
// job's end releases the first (interrupting its body read) and every
// later one.
func TestJobStdinStuckWriter(t *testing.T) {
	js := newJobStdin("owner", &jobRef{}, 1<<20)
	body := &stuckBody{reading: make(chan struct{}), stop: make(chan struct{})}
	var stopOnce sync.Once
	interrupt := func() { stopOnce.Do(func() { close(body.stop) }) }
	t.Cleanup(interrupt)
	first := make(chan writeResult, 1)
	go func() {
		n, closed, err := js.write(context.Background(), body, false, 1<<20, interrupt)
		first <- writeResult{n, closed, err}
	}()
	<-body.reading // the first writer holds the turn

	ctx, cancel := context.WithCancel(context.Background())
	second := make(chan writeResult, 1)
	go func() {
		n, closed, err := js.write(ctx, strings.NewReader("y"), false, 1<<20, nil)
		second <- writeResult{n, closed, err}
	}()
	cancel()
	if r := waitWrite(t, "the second writer after its request ended", second); !errors.Is(r.err, context.Canceled) || r.written != 0 {
		t.Errorf("second write = %+v, want nothing written and context.Canceled", r)
	}

	js.end()
	if r := waitWrite(t, "the stuck writer after the job's end", first); r.err != nil || !r.closed || r.written != 0 {
		t.Errorf("stuck write after the job's end = %+v, want 0 written, closed, no error", r)
	}
	n, closed, err := js.write(context.Background(), strings.NewReader("late"), false, 1<<20, nil)
	if err != nil || !closed || n != 0 {
		t.Errorf("write after the job's end = %d, %v, %v; want 0, closed, no error", n, closed, err)
	}
}
