package session

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

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
	// Cwd is the session's working directory, an absolute path of POSIX
	// or Windows (dsh on Windows writes C:\work\agent); empty means the
	// session has none. A header names it; a directory is only ever
	// opened from it after a check that it is absolute on this machine
	// (hostpath.ResolveDir), so a Windows path names no directory here.
	Cwd string
	// ParentSession is the id of the session this one was forked or
	// spawned from; empty means none, unless EmptyParentSession is set.
	ParentSession string
	// EmptyParentSession records a header that carries "parentSession": ""
	// (dsh keeps the key): it is written back so. It has no effect when
	// ParentSession is not empty.
	EmptyParentSession bool
	// SeedLength is the number of events inherited from ParentSession by a
	// fork; nil means absent (zero is a valid length).
	SeedLength *int64
	// Origin is "subagent" for a spawned child, empty otherwise.
	Origin string
	// DelegationDepth is 0 for a top-level session and parent+1 for a
	// subagent. It is always written; a reader takes absent as 0.
	DelegationDepth int
	// AgentPreset names the agent preset; empty means absent, unless
	// EmptyAgentPreset is set.
	AgentPreset string
	// EmptyAgentPreset records a header that carries "agentPreset": "",
	// as EmptyParentSession does for parentSession.
	EmptyAgentPreset bool
}

// IsAbsCwd reports whether cwd is absolute by POSIX or by Windows rules
// (a drive letter with a separator, C:\ or C:/, or a leading backslash,
// as \\server\share): the cwds dsh writes on either platform.
func IsAbsCwd(cwd string) bool {
	if filepath.IsAbs(cwd) || strings.HasPrefix(cwd, `\`) {
		return true
	}
	if len(cwd) < 3 || cwd[1] != ':' || (cwd[2] != '\\' && cwd[2] != '/') {
		return false
	}
	c := cwd[0] | 0x20
	return c >= 'a' && c <= 'z'
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
	if h.Cwd != "" && !IsAbsCwd(h.Cwd) {
		return &FieldError{Field: "cwd", Reason: fmt.Sprintf("must be an absolute path, got %q", h.Cwd)}
	}
	if h.SeedLength != nil && (*h.SeedLength < 0 || *h.SeedLength > maxSafeInteger) {
		return &FieldError{Field: "seedLength", Reason: "must be a non-negative safe integer"}
	}
	if h.Origin != "" && h.Origin != OriginSubagent {
		return &FieldError{Field: "origin", Reason: fmt.Sprintf("must be %q when present, got %q", OriginSubagent, h.Origin)}
	}
	if h.DelegationDepth < 0 || h.DelegationDepth > maxSafeInteger {
		return &FieldError{Field: "delegationDepth", Reason: "must be a non-negative safe integer"}
	}
	return nil
}

// MarshalJSON writes h byte for byte as dsh writes a header line: dsh's
// key order, absent optional fields omitted, delegationDepth always
// written, strings as JavaScript's JSON.stringify writes them
// (AppendJSONString). It refuses an invalid header.
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
	if h.ParentSession != "" || h.EmptyParentSession {
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
	if h.AgentPreset != "" || h.EmptyAgentPreset {
		b.WriteString(`,"agentPreset":`)
		writeString(&b, h.AgentPreset)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func writeString(b *bytes.Buffer, s string) {
	b.Write(AppendJSONString(b.AvailableBuffer(), s))
}

// UnmarshalJSON parses and validates a header line; see Parse.
func (h *Header) UnmarshalJSON(data []byte) error {
	parsed, err := Parse(data)
	if err != nil {
		return err
	}
	*h = parsed
	return nil
}

// Parse decodes one header line and validates it the way dsh's JSONL
// store loads one (DESIGN §3.1), so that a header loads here exactly when
// it loads in dsh:
//
//   - keys match exactly (no case folding); a repeated key keeps its last
//     value; unknown keys are ignored;
//   - a numeric version other than 0 is refused first, wrapping
//     ErrUnsupportedVersion (0.0, -0 and 0e5 are 0); a version that is not
//     a number is invalid;
//   - numbers are read as JavaScript reads them (the nearest double), so
//     createdAt 5.0 and 1e3 are integers; createdAt and delegationDepth
//     must be non-negative safe integers and not -0, seedLength a
//     non-negative safe integer;
//   - cwd is an absolute path of POSIX or Windows (IsAbsCwd: dsh on
//     Windows writes C:\work\agent; dsh on Linux refuses it, a documented
//     difference); parentSession and agentPreset are strings, "" included
//     (kept: EmptyParentSession, EmptyAgentPreset); origin is "subagent";
//     null is refused for every optional field;
//   - retired keys (sandboxMode, approvalPolicy) are refused whatever
//     their value, wrapping ErrRetiredField.
//
// One deliberate difference: a header without delegationDepth, written by
// dsh releases before the field existed, loads with depth 0, where dsh
// 0.1 refuses it (docs/dsh-compatibility.md). Errors are *FieldError, or
// a syntax error for a line that is not one JSON object.
func Parse(line []byte) (Header, error) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(line))
	if err := dec.Decode(&m); err != nil {
		return Header{}, fmt.Errorf("session header: %w", err)
	}
	if dec.More() {
		return Header{}, errors.New("session header: trailing data after the JSON object")
	}
	if m == nil {
		return Header{}, errors.New("session header: not a JSON object")
	}
	h, err := requiredFields(m)
	if err != nil {
		return Header{}, err
	}
	if err := optionalFields(m, &h); err != nil {
		return Header{}, err
	}
	if err := h.Validate(); err != nil {
		return Header{}, err
	}
	return h, nil
}

// requiredFields checks the fields every header has (type, version,
// id, createdAt) and returns a header holding them.
func requiredFields(m map[string]json.RawMessage) (Header, error) {
	if raw, ok := m["version"]; ok {
		if v, isNum := number(raw); isNum && v != Version {
			return Header{}, &FieldError{Field: "version", Reason: fmt.Sprintf("%s is not supported (only %d)", raw, Version), Err: ErrUnsupportedVersion}
		}
	}
	var typ string
	if !str(m["type"], &typ) || typ != HeaderType {
		return Header{}, &FieldError{Field: "type", Reason: `must be "session"`}
	}
	if _, ok := number(m["version"]); !ok {
		return Header{}, &FieldError{Field: "version", Reason: "must be the number 0"}
	}
	var h Header
	if !str(m["id"], &h.ID) || h.ID == "" {
		return Header{}, &FieldError{Field: "id", Reason: "must be a non-empty string"}
	}
	created, ok := strictInt(m["createdAt"])
	if !ok {
		return Header{}, &FieldError{Field: "createdAt", Reason: fmt.Sprintf("must be a non-negative safe integer other than -0, got %s", shown(m["createdAt"]))}
	}
	h.CreatedAt = created
	return h, nil
}

// optionalFields checks the optional fields of m, refuses the retired
// ones and sets the others in h.
func optionalFields(m map[string]json.RawMessage, h *Header) error {
	if raw, ok := m["delegationDepth"]; ok {
		n, ok := strictInt(raw)
		if !ok {
			return &FieldError{Field: "delegationDepth", Reason: fmt.Sprintf("must be a non-negative safe integer other than -0, got %s", raw)}
		}
		h.DelegationDepth = int(n)
	}
	if raw, ok := m["origin"]; ok {
		if !str(raw, &h.Origin) || h.Origin != OriginSubagent {
			return &FieldError{Field: "origin", Reason: fmt.Sprintf("must be %q when present, got %s", OriginSubagent, raw)}
		}
	}
	if raw, ok := m["agentPreset"]; ok {
		if !str(raw, &h.AgentPreset) {
			return &FieldError{Field: "agentPreset", Reason: fmt.Sprintf("must be a string when present, got %s", raw)}
		}
		h.EmptyAgentPreset = h.AgentPreset == ""
	}
	if _, ok := m["sandboxMode"]; ok {
		return &FieldError{Field: "sandboxMode", Reason: "is retired and refused", Err: ErrRetiredField}
	}
	if _, ok := m["approvalPolicy"]; ok {
		return &FieldError{Field: "approvalPolicy", Reason: "is retired and refused", Err: ErrRetiredField}
	}
	if raw, ok := m["cwd"]; ok {
		if !str(raw, &h.Cwd) || !IsAbsCwd(h.Cwd) {
			return &FieldError{Field: "cwd", Reason: fmt.Sprintf("must be an absolute path when present, got %s", raw)}
		}
	}
	if raw, ok := m["parentSession"]; ok {
		if !str(raw, &h.ParentSession) {
			return &FieldError{Field: "parentSession", Reason: fmt.Sprintf("must be a string when present, got %s", raw)}
		}
		h.EmptyParentSession = h.ParentSession == ""
	}
	if raw, ok := m["seedLength"]; ok {
		v, isNum := number(raw)
		if !isNum || !safeInteger(v) || v < 0 {
			return &FieldError{Field: "seedLength", Reason: fmt.Sprintf("must be a non-negative safe integer, got %s", raw)}
		}
		n := int64(v)
		h.SeedLength = &n
	}
	return nil
}

// shown returns raw for a message, or "nothing" when the key is absent.
func shown(raw json.RawMessage) string {
	if raw == nil {
		return "nothing"
	}
	return string(raw)
}

// number reports the value of raw when it is a JSON number.
func number(raw json.RawMessage) (float64, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '-' && (raw[0] < '0' || raw[0] > '9') {
		return 0, false
	}
	return jsNumber(string(raw)), true
}

// str stores raw in *dst when it is a JSON string (not null).
func str(raw json.RawMessage, dst *string) bool {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '"' {
		return false
	}
	return json.Unmarshal(raw, dst) == nil
}

// safeInteger is JavaScript's Number.isSafeInteger.
func safeInteger(v float64) bool {
	return v == math.Trunc(v) && math.Abs(v) <= maxSafeInteger
}

// strictInt reads raw as dsh reads createdAt and delegationDepth: a
// number that is a non-negative safe integer and not -0.
func strictInt(raw json.RawMessage) (int64, bool) {
	v, ok := number(raw)
	if !ok || !safeInteger(v) || v < 0 || v == 0 && math.Signbit(v) {
		return 0, false
	}
	return int64(v), true
}

// NewID returns a fresh session id of the form "session-<uuid v4>".
func NewID() string {
	return "session-" + uuid.NewString()
}
