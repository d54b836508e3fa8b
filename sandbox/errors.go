package sandbox

import (
	"errors"
	"fmt"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/signals"
)

// Error classes. Every error this package and its backends return wraps
// exactly one of them; test with errors.Is. ExitCode is the one place
// that maps a class to a process exit code.
var (
	// ErrInvalid is an invalid argument: the request, policy or
	// environment is malformed. Nothing ran. Exit code 2.
	ErrInvalid = errors.New("invalid argument")
	// ErrNotFound is a missing object: an image, a job, a runtime
	// binary named explicitly. Nothing ran. Exit code 125.
	ErrNotFound = errors.New("not found")
	// ErrUnavailable means the backend cannot serve the call right now:
	// a runtime or daemon is missing or unusable, or the caller gave up.
	// Exit code 125.
	ErrUnavailable = errors.New("unavailable")
	// ErrInternal is a failure of the sandbox itself; the outcome of the
	// command is unknown. Exit code 125.
	ErrInternal = errors.New("internal error")
)

// Exit codes of ExitCode for sandbox failures and timeouts.
const (
	ExitUsage   = 2   // ErrInvalid
	ExitTimeout = 124 // the call hit its timeout
	ExitSandbox = 125 // any other sandbox failure, or an unknown outcome
)

// classError is an error of one class. Its message is the formatted
// message alone: classes are for errors.Is, not for reading.
type classError struct {
	class error
	err   error
}

func (e *classError) Error() string { return e.err.Error() }

// Unwrap returns the class and, when the message wrapped errors with %w,
// the wrapped errors too, so errors.Is finds both.
func (e *classError) Unwrap() []error {
	if u, ok := e.err.(interface{ Unwrap() []error }); ok {
		return append([]error{e.class}, u.Unwrap()...)
	}
	if u := errors.Unwrap(e.err); u != nil {
		return []error{e.class, u}
	}
	return []error{e.class}
}

// Errorf formats an error of the given class, one of ErrInvalid,
// ErrNotFound, ErrUnavailable or ErrInternal; a nil class means
// ErrInternal. The message is fmt.Errorf(format, args...) and may itself
// wrap other errors with %w; errors.Is(err, class) is true. The message
// should name the offending field or value, never an environment value or
// a secret.
func Errorf(class error, format string, args ...any) error {
	if class == nil {
		class = ErrInternal
	}
	return &classError{class: class, err: fmt.Errorf(format, args...)}
}

// ExitCode maps the outcome of Executor.Run to a process exit code. It is
// the only such mapping in the module:
//
//   - err wraps ErrInvalid: 2;
//   - any other non-nil err: 125 (the sandbox failed; nothing ran or the
//     outcome is unknown);
//   - res is nil: 125;
//   - res.TimedOut: 124, however the command ended;
//   - res.Signal names signal N: 128+N (an unknown name gives 125);
//   - otherwise *res.ExitCode, or 125 when it is nil.
func ExitCode(res *Result, err error) int {
	switch {
	case err != nil && errors.Is(err, ErrInvalid):
		return ExitUsage
	case err != nil, res == nil:
		return ExitSandbox
	case res.TimedOut:
		return ExitTimeout
	case res.Signal != "":
		if n, ok := signals.Number(res.Signal); ok {
			return 128 + int(n)
		}
		return ExitSandbox
	case res.ExitCode == nil:
		return ExitSandbox
	}
	return *res.ExitCode
}
