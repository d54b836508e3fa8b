package docker

import (
	"context"
	"io"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/pkg/stdcopy"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// withTerminal asks the engine for a container on a terminal of t's
// size (Config.Tty): its attach stream is then the terminal's output,
// raw, with no stdout/stderr framing. A nil t changes nothing.
func withTerminal(cfg *container.Config, hc *container.HostConfig, t *sandbox.Terminal) {
	if t == nil {
		return
	}
	size := t.Size.OrDefault()
	cfg.Tty = true
	hc.ConsoleSize = [2]uint{uint(size.Rows), uint(size.Cols)}
}

// copyOutput copies the attach stream into the captures: demultiplexed
// into stdout and stderr, or, for a container on a terminal, the one
// terminal stream into stdout.
func copyOutput(stdout, stderr io.Writer, r io.Reader, tty bool) error {
	if tty {
		_, err := io.Copy(stdout, r)
		return err
	}
	_, err := stdcopy.StdCopy(stdout, stderr, r)
	return err
}

// followTerminal keeps the started container's terminal at t's size
// until done closes. A nil t returns at once.
func (e *Executor) followTerminal(ctx context.Context, id string, t *sandbox.Terminal, done <-chan struct{}) {
	t.KeepSize(ctx, done, func(ctx context.Context, s sandbox.WindowSize) error {
		return e.cli.ContainerResize(ctx, id, container.ResizeOptions{Height: uint(s.Rows), Width: uint(s.Cols)})
	})
}
