package overlay

import (
	"errors"
	"strconv"
	"strings"
)

// Classes of registration errors, wrapped by *RegistrationError; test with
// errors.Is.
var (
	ErrBlankName          = errors.New("contributor name is blank")
	ErrMalformedName      = errors.New("contributor name has control characters or surrounding spaces")
	ErrDuplicateName      = errors.New("a contributor with this name is already registered")
	ErrNoResolver         = errors.New("contributor has no Resolve function")
	ErrNoKeys             = errors.New("contributor declares no keys")
	ErrMalformedKey       = errors.New("malformed key: want DSH_ followed by [A-Z][A-Z0-9_]*")
	ErrReservedKey        = errors.New("key is reserved for a built-in contributor")
	ErrNotReserved        = errors.New("the built-in path only accepts reserved keys")
	ErrMissingDescription = errors.New("key has no description")
	ErrDuplicateKey       = errors.New("key is declared twice by the same contributor")
	ErrKeyTaken           = errors.New("key is owned by another contributor")
	ErrNoRegistry         = errors.New("registrar has no registry (zero value)")
)

// RegistrationError reports why Register or RegisterBuiltIn refused a
// contributor.
type RegistrationError struct {
	// Contributor is the name as given, possibly blank.
	Contributor string
	// Key is the offending key; empty when the problem is not about a key.
	Key string
	// Owner names the contributor that already owns Key (ErrKeyTaken only).
	Owner string
	// Err is the class, one of the Err* values above.
	Err error
}

func (e *RegistrationError) Error() string {
	var b strings.Builder
	b.WriteString("overlay: register contributor ")
	b.WriteString(strconv.Quote(e.Contributor))
	if e.Key != "" {
		b.WriteString(": key ")
		b.WriteString(strconv.Quote(e.Key))
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if e.Owner != "" {
		b.WriteString(" (owner ")
		b.WriteString(strconv.Quote(e.Owner))
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns the error's class.
func (e *RegistrationError) Unwrap() error { return e.Err }

// Classes of Collect errors, wrapped by *CollectError; test with errors.Is.
var (
	ErrUndeclaredKey = errors.New("resolver returned a key it did not declare")
	ErrNotString     = errors.New("resolver returned a value that is not a string")
	ErrNULInValue    = errors.New("resolver returned a value containing a NUL byte")
)

// CollectError reports a contributor that failed during Collect: its
// resolver returned an error, an undeclared key or a bad value, or the
// context ended before it ran.
type CollectError struct {
	// Contributor is the failing contributor's name.
	Contributor string
	// Key is the offending key; empty for a resolver or context error.
	Key string
	// Type is the Go type of a non-string value (ErrNotString only).
	Type string
	// Err is ErrUndeclaredKey, ErrNotString, ErrNULInValue, the context's
	// error, or the resolver's own error.
	Err error
}

func (e *CollectError) Error() string {
	var b strings.Builder
	b.WriteString("overlay: collect: contributor ")
	b.WriteString(strconv.Quote(e.Contributor))
	if e.Key != "" {
		b.WriteString(": key ")
		b.WriteString(strconv.Quote(e.Key))
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if e.Type != "" {
		b.WriteString(" (got ")
		b.WriteString(e.Type)
		b.WriteString(")")
	}
	return b.String()
}

// Unwrap returns the underlying error.
func (e *CollectError) Unwrap() error { return e.Err }
