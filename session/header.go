package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"

	"github.com/google/uuid"
)

// HeaderType is the value of the "type" key on a header line.
const HeaderType = "session"

// Version is the only header version this package reads or writes.
const Version = 0

// OriginSubagent is the only accepted value of Header.Origin.
const OriginSubagent = "subagent"

// maxSafeInteger is JavaScript's Number.MAX_SAFE_INTEGER, the largest
// integer dsh writes without loss.
const maxSafeInteger = 1<<53 - 1

// Header is the first line of a dsh session log. Its zero value is not
// valid: ID must be set. A Header is a plain value and safe to copy.
type Header struct {
	// ID is any non-empty string; it is never parsed.
	ID string
	// CreatedAt is the creation time in Unix milliseconds, a non-negative
	// safe integer.
	CreatedAt int64
	// Cwd is the session's working directory, an absolute path; empty
	// means the session has none.
	Cwd string
	// ParentSession is the id of the session this one was forked or
	// spawned from; empty means none.
	ParentSession string
	// SeedLength is the number of events inherited from ParentSession by a
	// fork; nil means absent (zero is a valid length).
	SeedLength *int64
	// Origin is "subagent" for a spawned child, empty otherwise.
	Origin string
	// DelegationDepth is 0 for a top-level session and parent+1 for a
	// subagent. It is always written; a reader takes absent as 0.
	DelegationDepth int
	// AgentPreset names the agent preset; empty means absent.
	AgentPreset string
}

// FieldError reports an invalid header field. Field is the JSON key.
type FieldError struct {
	Field  string
	Reason string
	// Err is the class of the error, if any (ErrUnsupportedVersion,
	// ErrRetiredField); nil for plain invalid values.
	Err error
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("session header: field %q: %s", e.Field, e.Reason)
}

// Unwrap returns the error's class, if any.
func (e *FieldError) Unwrap() error { return e.Err }

// ErrUnsupportedVersion is wrapped by the error for a header whose version
// is not Version.
var ErrUnsupportedVersion = errors.New("unsupported session header version")

// ErrRetiredField is wrapped by the error for a header that carries a field
// dsh no longer accepts (sandboxMode, approvalPolicy).
var ErrRetiredField = errors.New("retired session header field")

// Validate reports the first invalid field of h as a *FieldError.
func (h Header) Validate() error {
	if h.ID == "" {
		return &FieldError{Field: "id", Reason: "must be a non-empty string"}
	}
	if h.CreatedAt < 0 || h.CreatedAt > maxSafeInteger {
		return &FieldError{Field: "createdAt", Reason: "must be a non-negative safe integer (epoch milliseconds)"}
	}
	if h.Cwd != "" && !isAbs(h.Cwd) {
		return &FieldError{Field: "cwd", Reason: fmt.Sprintf("must be an absolute path, got %q", h.Cwd)}
	}
	if h.SeedLength != nil && (*h.SeedLength < 0 || *h.SeedLength > maxSafeInteger) {
		return &FieldError{Field: "seedLength", Reason: "must be a non-negative safe integer"}
	}
	if h.Origin != "" && h.Origin != OriginSubagent {
		return &FieldError{Field: "origin", Reason: fmt.Sprintf("must be %q when present, got %q", OriginSubagent, h.Origin)}
	}
	if h.DelegationDepth < 0 {
		return &FieldError{Field: "delegationDepth", Reason: "must be a non-negative integer"}
	}
	return nil
}

// isAbs accepts POSIX absolute paths and, since dsh logs may come from
// Windows hosts, drive-letter and UNC paths.
func isAbs(p string) bool {
	if filepath.IsAbs(p) {
		return true
	}
	if len(p) >= 3 && p[1] == ':' && (p[2] == '\\' || p[2] == '/') &&
		(p[0] >= 'A' && p[0] <= 'Z' || p[0] >= 'a' && p[0] <= 'z') {
		return true
	}
	return len(p) >= 2 && p[0] == '\\' && p[1] == '\\'
}

// MarshalJSON writes h in dsh's key order, omitting absent optional fields,
// always writing delegationDepth and without HTML escaping. It refuses an
// invalid header.
func (h Header) MarshalJSON() ([]byte, error) {
	if err := h.Validate(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(`{"type":"session","version":0,"id":`)
	writeString(&b, h.ID)
	b.WriteString(`,"createdAt":`)
	b.WriteString(strconv.FormatInt(h.CreatedAt, 10))
	if h.Cwd != "" {
		b.WriteString(`,"cwd":`)
		writeString(&b, h.Cwd)
	}
	if h.ParentSession != "" {
		b.WriteString(`,"parentSession":`)
		writeString(&b, h.ParentSession)
	}
	if h.SeedLength != nil {
		b.WriteString(`,"seedLength":`)
		b.WriteString(strconv.FormatInt(*h.SeedLength, 10))
	}
	if h.Origin != "" {
		b.WriteString(`,"origin":`)
		writeString(&b, h.Origin)
	}
	b.WriteString(`,"delegationDepth":`)
	b.WriteString(strconv.Itoa(h.DelegationDepth))
	if h.AgentPreset != "" {
		b.WriteString(`,"agentPreset":`)
		writeString(&b, h.AgentPreset)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func writeString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // Encode appends a newline
}

// wireHeader is the decoding form; pointers tell absent from zero.
type wireHeader struct {
	Type            *string      `json:"type"`
	Version         *json.Number `json:"version"`
	ID              *string      `json:"id"`
	CreatedAt       *json.Number `json:"createdAt"`
	Cwd             *string      `json:"cwd"`
	ParentSession   *string      `json:"parentSession"`
	SeedLength      *json.Number `json:"seedLength"`
	Origin          *string      `json:"origin"`
	DelegationDepth *json.Number `json:"delegationDepth"`
	AgentPreset     *string      `json:"agentPreset"`
	// Retired keys are refused whatever their value, null included: a
	// RawMessage (unlike a pointer) receives the literal null.
	SandboxMode    json.RawMessage `json:"sandboxMode"`
	ApprovalPolicy json.RawMessage `json:"approvalPolicy"`
}

// UnmarshalJSON parses and validates a header line. Unknown keys are
// ignored; retired keys and versions other than 0 are refused.
func (h *Header) UnmarshalJSON(data []byte) error {
	parsed, err := Parse(data)
	if err != nil {
		return err
	}
	*h = parsed
	return nil
}

// Parse decodes one header line and validates it. Errors are *FieldError,
// possibly wrapping ErrUnsupportedVersion or ErrRetiredField.
func Parse(line []byte) (Header, error) {
	var w wireHeader
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	if err := dec.Decode(&w); err != nil {
		return Header{}, fmt.Errorf("session header: %w", err)
	}
	if dec.More() {
		return Header{}, errors.New("session header: trailing data after the JSON object")
	}
	if w.Type == nil || *w.Type != HeaderType {
		return Header{}, &FieldError{Field: "type", Reason: `must be "session"`}
	}
	if len(w.SandboxMode) > 0 {
		return Header{}, &FieldError{Field: "sandboxMode", Reason: "is retired and refused", Err: ErrRetiredField}
	}
	if len(w.ApprovalPolicy) > 0 {
		return Header{}, &FieldError{Field: "approvalPolicy", Reason: "is retired and refused", Err: ErrRetiredField}
	}
	if w.Version == nil {
		return Header{}, &FieldError{Field: "version", Reason: "is required"}
	}
	if v, err := w.Version.Int64(); err != nil || v != Version {
		return Header{}, &FieldError{Field: "version", Reason: fmt.Sprintf("%s is not supported (only %d)", *w.Version, Version), Err: ErrUnsupportedVersion}
	}
	var h Header
	if w.ID == nil {
		return Header{}, &FieldError{Field: "id", Reason: "is required"}
	}
	h.ID = *w.ID
	if w.CreatedAt == nil {
		return Header{}, &FieldError{Field: "createdAt", Reason: "is required"}
	}
	var err error
	if h.CreatedAt, err = safeInt(w.CreatedAt, "createdAt"); err != nil {
		return Header{}, err
	}
	if w.Cwd != nil {
		if *w.Cwd == "" {
			return Header{}, &FieldError{Field: "cwd", Reason: "must be an absolute path when present"}
		}
		h.Cwd = *w.Cwd
	}
	if w.ParentSession != nil {
		if *w.ParentSession == "" {
			return Header{}, &FieldError{Field: "parentSession", Reason: "must be non-empty when present"}
		}
		h.ParentSession = *w.ParentSession
	}
	if w.SeedLength != nil {
		n, err := safeInt(w.SeedLength, "seedLength")
		if err != nil {
			return Header{}, err
		}
		h.SeedLength = &n
	}
	if w.Origin != nil {
		if *w.Origin != OriginSubagent {
			return Header{}, &FieldError{Field: "origin", Reason: fmt.Sprintf("must be %q when present, got %q", OriginSubagent, *w.Origin)}
		}
		h.Origin = *w.Origin
	}
	if w.DelegationDepth != nil {
		n, err := safeInt(w.DelegationDepth, "delegationDepth")
		if err != nil {
			return Header{}, err
		}
		h.DelegationDepth = int(n)
	}
	if w.AgentPreset != nil {
		if *w.AgentPreset == "" {
			return Header{}, &FieldError{Field: "agentPreset", Reason: "must be non-empty when present"}
		}
		h.AgentPreset = *w.AgentPreset
	}
	if err := h.Validate(); err != nil {
		return Header{}, err
	}
	return h, nil
}

func safeInt(n *json.Number, field string) (int64, error) {
	v, err := n.Int64()
	if err != nil || v < 0 || v > maxSafeInteger {
		return 0, &FieldError{Field: field, Reason: fmt.Sprintf("must be a non-negative safe integer, got %s", string(*n))}
	}
	return v, nil
}

// NewID returns a fresh session id of the form "session-<uuid v4>".
func NewID() string {
	return "session-" + uuid.NewString()
}
