package containerd

import (
	"context"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// ioOpts adds cio.WithTerminal to opts for a call on a terminal: the
// shim then relays the terminal's one output stream to stdout (stderr is
// unused).
func ioOpts(req *sandbox.Request, opts ...cio.Opt) []cio.Opt {
	if req.Terminal != nil {
		opts = append(opts, cio.WithTerminal)
	}
	return opts
}

// followTerminal keeps the started task's terminal at t's size until
// done closes. A nil t returns at once.
func followTerminal(ctx context.Context, task containerd.Task, t *sandbox.Terminal, done <-chan struct{}) {
	t.KeepSize(ctx, done, func(ctx context.Context, s sandbox.WindowSize) error {
		return task.Resize(ctx, uint32(s.Cols), uint32(s.Rows))
	})
}
