package types

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
	// ErrMethodNotAllowed is a known path asked with a method it does not
	// answer (405 with an Allow header).
	ErrMethodNotAllowed = errors.New("method not allowed")
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

// classes are the names of ErrorBody.Class and their errors, the most
// specific first.
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
	{"method_not_allowed", ErrMethodNotAllowed},
	{"internal", sandbox.ErrInternal},
}

// Body returns the ErrorBody of err: its class, the field a *FieldError
// names, and its message. A body over the server's limit is class invalid
// naming "body".
func Body(err error) ErrorBody {
	b := ErrorBody{Class: "internal", Message: err.Error()}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		var fe *FieldError
		if errors.As(err, &fe) { // a bounded stream other than the body
			return ErrorBody{Class: "invalid", Field: fe.Field, Message: fe.Error()}
		}
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
