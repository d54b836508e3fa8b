package api

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Error classes of ErrorBody.Class beyond the sandbox classes.
var (
	// ErrUnauthorized is a missing or wrong bearer token (401).
	ErrUnauthorized = errors.New("unauthorized")
	// ErrOverloaded means the concurrency limit and the queue are full,
	// or a per-session cap is reached (429 with Retry-After).
	ErrOverloaded = errors.New("overloaded")
	// ErrForbidden means the client may not do what it asks: use a
	// directory outside its scope, or connect from inside a sandboxed call
	// (403).
	ErrForbidden = errors.New("forbidden")
)

// FieldError is an invalid or forbidden request field. It wraps
// sandbox.ErrInvalid, and ErrForbidden too when Forbidden is set.
type FieldError struct {
	// Field is the JSON path of the field, e.g. "session.cwd" or "env[2]".
	Field string
	// Reason says what is wrong with it.
	Reason string
	// Forbidden marks a well-formed value this client may not use (403
	// instead of 400).
	Forbidden bool
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Reason }

// Unwrap returns sandbox.ErrInvalid, preceded by ErrForbidden when the
// field is forbidden.
func (e *FieldError) Unwrap() []error {
	if e.Forbidden {
		return []error{ErrForbidden, sandbox.ErrInvalid}
	}
	return []error{sandbox.ErrInvalid}
}

func fieldErrorf(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

func forbiddenf(field, format string, args ...any) error {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...), Forbidden: true}
}

// HTTPStatus is the one mapping from an error class to an HTTP status:
// sandbox.ErrInvalid → 400, sandbox.ErrNotFound → 404,
// sandbox.ErrUnavailable → 503, ErrUnauthorized → 401, ErrForbidden → 403,
// ErrOverloaded → 429, a body over the limit → 413, anything else → 500.
func HTTPStatus(err error) int {
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, ErrOverloaded):
		return http.StatusTooManyRequests
	case errors.Is(err, sandbox.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, sandbox.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, sandbox.ErrUnavailable):
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

var classes = []struct {
	name string
	err  error
}{
	{"forbidden", ErrForbidden},
	{"invalid", sandbox.ErrInvalid},
	{"not_found", sandbox.ErrNotFound},
	{"unavailable", sandbox.ErrUnavailable},
	{"unauthorized", ErrUnauthorized},
	{"overloaded", ErrOverloaded},
	{"internal", sandbox.ErrInternal},
}

// Body returns the ErrorBody of err.
func Body(err error) ErrorBody {
	b := ErrorBody{Class: "internal", Message: err.Error()}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return ErrorBody{Class: "invalid", Field: "body", Message: fmt.Sprintf("body: larger than %d bytes", tooBig.Limit)}
	}
	for _, c := range classes {
		if errors.Is(err, c.err) {
			b.Class = c.name
			break
		}
	}
	var fe *FieldError
	if errors.As(err, &fe) {
		b.Field = fe.Field
	}
	return b
}

// Err turns an ErrorBody received from the service back into an error of
// the same class, so that a client maps it to the same exit code as a
// local call would.
func (b ErrorBody) Err() error {
	class := sandbox.ErrInternal
	for _, c := range classes {
		if c.name == b.Class {
			class = c.err
		}
	}
	if b.Field != "" && (class == sandbox.ErrInvalid || class == ErrForbidden) {
		return &FieldError{Field: b.Field, Reason: trimField(b.Message, b.Field), Forbidden: class == ErrForbidden}
	}
	return &remoteError{class: class, msg: b.Message}
}

func trimField(msg, field string) string {
	if len(msg) > len(field)+2 && msg[:len(field)+2] == field+": " {
		return msg[len(field)+2:]
	}
	return msg
}

type remoteError struct {
	class error
	msg   string
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.class }
