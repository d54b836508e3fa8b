package main

import (
	"context"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/console"
)

// execTTY sets up the request of `exec -t`: the CLI's stdin, which must
// be a terminal, is streamed (-t implies -i) to a terminal inside the
// container of the terminal's current size. It refuses the flags that
// cannot go with it.
func execTTY(c *cli.Context, req *sandbox.Request) error {
	switch {
	case c.String("stdin-file") != "":
		return usageError("--tty: reads the CLI's terminal; not together with --stdin-file")
	case c.String("server") != "":
		return usageError("--tty: not available with --server (the API has no terminal: it streams stdin, stdout and stderr, not a pseudo-terminal and its size changes)")
	case c.Bool("json"):
		return usageError("--tty: the output is a terminal stream; not together with --json")
	}
	in, ok := c.App.Reader.(*os.File)
	if !ok || !console.IsTerminal(in) {
		return usageError("--tty: the input device is not a terminal (use -i to stream a pipe)")
	}
	size, err := console.Size(in)
	if err != nil {
		size = sandbox.WindowSize{}.OrDefault()
	}
	req.StdinReader = in
	req.Terminal = &sandbox.Terminal{Size: size}
	// The terminal is the client's: its TERM replaces the TERM=dumb every
	// call gets, as docker exec -t passes it (ordinary env: after the
	// terminal settings).
	req.Env = append(req.Env, "TERM="+clientTerm(os.Getenv("TERM")))
	return nil
}

// clientTerm is the TERM a call on the client's terminal gets: the
// client's own when it is a plain terminal name, else xterm.
func clientTerm(term string) string {
	if term == "" || len(term) > 64 {
		return "xterm"
	}
	for _, r := range term {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._+-", r)) {
			return "xterm"
		}
	}
	return term
}

// startTerminal puts the CLI's terminal in raw mode for `exec -t`, so
// that every key reaches the command, and feeds its size changes
// (SIGWINCH) to req.Terminal.Resize. The returned restore puts the
// terminal back and stops following its size; it is idempotent, and a
// SIGHUP (the terminal went away) cancels the call so that it runs. The
// call's context is c.Context, which SIGINT and SIGTERM cancel already.
func startTerminal(c *cli.Context, req *sandbox.Request) (restore func(), err error) {
	in := req.StdinReader.(*os.File)
	unraw, err := console.MakeRaw(in)
	if err != nil {
		return nil, usageError("--tty: %v", err)
	}
	resize := make(chan sandbox.WindowSize, 1)
	req.Terminal.Resize = resize
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGWINCH, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(c.Context)
	c.Context = ctx
	stop := make(chan struct{})
	go followTerminal(in, sigs, resize, cancel, stop)
	var once sync.Once
	return func() {
		once.Do(func() {
			signal.Stop(sigs)
			close(stop)
			_ = unraw()
		})
	}, nil
}

// followTerminal sends in's size to resize on every SIGWINCH (the
// latest size replaces one not yet taken) and cancels on SIGHUP, until
// stop closes.
func followTerminal(in *os.File, sigs <-chan os.Signal, resize chan sandbox.WindowSize, cancel context.CancelFunc, stop <-chan struct{}) {
	defer cancel()
	for {
		select {
		case <-stop:
			return
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				cancel()
				continue
			}
			size, err := console.Size(in)
			if err != nil {
				continue
			}
			select {
			case <-resize: // not taken yet: replaced
			default:
			}
			resize <- size
		}
	}
}
