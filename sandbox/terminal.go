package sandbox

import (
	"context"
	"time"
)

// Terminal asks for a call that runs on a pseudo-terminal inside its
// container (exec -t): the command's stdin, stdout and stderr are the
// terminal's slave, Request.StdinSource is what the user types and
// Request.Stdout (and the Result's stdout capture) receives the terminal's
// output, one stream with no separate stderr. A policy with DenyTTY
// refuses it. It is a plain value; Resize is read by one call only.
type Terminal struct {
	// Size is the window size at start; a zero Rows or Cols means 24
	// rows of 80 columns (WindowSize.OrDefault).
	Size WindowSize
	// Resize delivers later window sizes (SIGWINCH on the caller's
	// terminal); nil means the size never changes. The backend reads it
	// until the call ends and stops then: a sender must not block on it
	// forever (send with select, or buffer it).
	Resize <-chan WindowSize
}

// WindowSize is a terminal's size in character cells.
type WindowSize struct {
	Rows, Cols uint16
}

// defaultWindowSize is the size of a Terminal that gives none.
var defaultWindowSize = WindowSize{Rows: 24, Cols: 80}

// OrDefault returns s, or the size of a Terminal that gives none, 24 rows
// of 80 columns, when s has a zero dimension.
func (s WindowSize) OrDefault() WindowSize {
	if s.Rows == 0 || s.Cols == 0 {
		return defaultWindowSize
	}
	return s
}

// resizeTimeout bounds one resize, so that a daemon that does not answer
// cannot hold the call.
const resizeTimeout = 5 * time.Second

// KeepSize calls apply with t's start size, then with every size
// t.Resize delivers, until done is closed (or Resize is closed); it
// returns then. Each call gets ctx bounded by a few seconds, and a size
// with a zero dimension is the default (OrDefault). Errors of apply are
// ignored: a resize that fails leaves the old size, and the call goes
// on. A nil t returns at once. Run it on its own goroutine once the
// command has started.
func (t *Terminal) KeepSize(ctx context.Context, done <-chan struct{}, apply func(context.Context, WindowSize) error) {
	if t == nil {
		return
	}
	do := func(s WindowSize) {
		rctx, cancel := context.WithTimeout(ctx, resizeTimeout)
		defer cancel()
		_ = apply(rctx, s.OrDefault())
	}
	do(t.Size)
	for {
		select {
		case <-done:
			return
		case s, ok := <-t.Resize:
			if !ok {
				return
			}
			do(s)
		}
	}
}
