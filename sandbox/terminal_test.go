package sandbox

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestWindowSizeOrDefault(t *testing.T) {
	tests := []struct{ in, want WindowSize }{
		{WindowSize{}, defaultWindowSize},
		{WindowSize{Rows: 40}, defaultWindowSize},
		{WindowSize{Cols: 120}, defaultWindowSize},
		{WindowSize{Rows: 40, Cols: 120}, WindowSize{Rows: 40, Cols: 120}},
	}
	for _, tt := range tests {
		if got := tt.in.OrDefault(); got != tt.want {
			t.Errorf("%+v.OrDefault() = %+v, want %+v", tt.in, got, tt.want)
		}
	}
}

// TestKeepSize: the start size first, then each later one (a zero size
// as the default), each with a deadline; it returns when done closes,
// and at once for a nil terminal.
func TestKeepSize(t *testing.T) {
	resize := make(chan WindowSize, 3)
	resize <- WindowSize{Rows: 10, Cols: 20}
	resize <- WindowSize{}
	term := &Terminal{Size: WindowSize{Rows: 5, Cols: 6}, Resize: resize}
	done := make(chan struct{})
	got := make(chan WindowSize, 3)
	ended := make(chan struct{})
	go func() {
		term.KeepSize(context.Background(), done, func(ctx context.Context, s WindowSize) error {
			if _, ok := ctx.Deadline(); !ok {
				t.Errorf("KeepSize called apply without a deadline")
			}
			got <- s
			return errors.New("ignored")
		})
		close(ended)
	}()
	for _, want := range []WindowSize{{Rows: 5, Cols: 6}, {Rows: 10, Cols: 20}, defaultWindowSize} {
		if s := <-got; s != want {
			t.Errorf("KeepSize applied %+v, want %+v", s, want)
		}
	}
	close(done)
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("KeepSize did not return when done closed")
	}
	(*Terminal)(nil).KeepSize(context.Background(), nil, nil)
}
