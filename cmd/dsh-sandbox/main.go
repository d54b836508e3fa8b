// Command dsh-sandbox runs AI agents' shell commands in short-lived
// containers and inspects the facts they get: the DSH_* environment,
// transcript locations and session logs. It is the only package that picks
// backends and the only one that exits the process.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "0.1.0-dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := checkCompletion(os.Args)
	if err == nil {
		app := newApp(os.Stdout, os.Stderr)
		err = app.RunContext(ctx, flagsFirst(app, os.Args))
	}
	stop()
	code := exitCode(err)
	if err != nil && !errors.As(err, new(*childExit)) {
		fmt.Fprintf(os.Stderr, "dsh-sandbox: %v\n", err)
	}
	os.Exit(code)
}

// childExit carries the exit code of a command that ran in the sandbox,
// so that `exec` exits with it without printing an error.
type childExit struct{ code int }

func (e *childExit) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// exitCode is the CLI's one mapping from an error to an exit status:
// the child's code for a call that ran; 125 when the service refused or
// could not take the call (unauthorized, forbidden, overloaded: nothing
// ran); the sandbox classes (2 for invalid input, 125 for a sandbox
// failure, an unreachable service included); 1 for anything else.
func exitCode(err error) int {
	var ce *childExit
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, types.ErrUnauthorized), errors.Is(err, types.ErrForbidden), errors.Is(err, types.ErrOverloaded):
		return sandbox.ExitSandbox
	case errors.Is(err, sandbox.ErrInvalid), errors.Is(err, sandbox.ErrNotFound),
		errors.Is(err, sandbox.ErrUnavailable), errors.Is(err, sandbox.ErrInternal):
		return sandbox.ExitCode(nil, err)
	default:
		return 1
	}
}

// usageError marks a bad flag or argument (exit 2).
func usageError(format string, args ...any) error {
	return sandbox.Errorf(sandbox.ErrInvalid, format, args...)
}
