package hooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// Dialect is one hook protocol: how its configuration reads and which
// bytes and environment its hooks get. The two implementations are
// claudecode.Dialect and codex.Dialect. Implementations are stateless and
// safe for concurrent use.
type Dialect interface {
	// Name is the dialect's name on the command line: "claude-code" or
	// "codex".
	Name() string
	// Syntax says how the dialect's configuration is read.
	Syntax() Syntax
	// ToolName presents the harness's tool name (such as "bash") under
	// the dialect's name ("Bash"); a configuration's toolNames override
	// it.
	ToolName(internal string) string
	// Payload returns the exact stdin bytes of a hook for ev, whose
	// ToolName is already the presented name. It does no I/O besides
	// calling loc.Locate. An event the dialect does not know is an error
	// wrapping sandbox.ErrInvalid.
	Payload(ev Event, loc persistence.Locator) ([]byte, error)
	// Env returns the ordinary environment (KEY=VALUE) of a hook for ev;
	// pluginRoot is the plugin directory, "" for none. It never returns
	// DSH_* names.
	Env(ev Event, pluginRoot string) []string
}

// Syntax is the configuration grammar of a dialect.
type Syntax struct {
	// Events are the event names a configuration may use; a name outside
	// Events rejects the file.
	Events []string
	// Fired are the events the dialect builds payloads for; hooks of the
	// other Events are accepted with a warning and never run.
	Fired []string
	// ExactMatchers selects Claude Code's matcher rule: a pattern made of
	// only [A-Za-z0-9_|] is an exact alternation. Otherwise every
	// non-empty pattern but "*" is an unanchored regular expression.
	ExactMatchers bool
	// TimeoutSec accepts "timeoutSec" as another spelling of "timeout".
	TimeoutSec bool
	// SkipAsync skips hooks with "async": true, with a warning.
	SkipAsync bool
}

// Field is one key of a payload object, in the order it is written.
type Field struct {
	Key   string
	Value any
}

// EncodeObject writes fields as one compact JSON object, keys in the given
// order, byte for byte as dsh's JSON.stringify writes it: strings per
// session.AppendJSONString (`<`, `>`, `&`, U+2028 and U+2029 raw), a
// json.RawMessage through session.JSValue, nil as null, anything else as
// encoding/json marshals it, then through session.JSValue. A value that does not encode is an error
// naming its key.
func EncodeObject(fields ...Field) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(session.AppendJSONString(b.AvailableBuffer(), f.Key))
		b.WriteByte(':')
		v, err := marshal(f.Value)
		if err != nil {
			return nil, fmt.Errorf("payload field %q: %w", f.Key, err)
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// marshal encodes v as JSON.stringify would.
func marshal(v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return []byte("null"), nil
	case string:
		return session.AppendJSONString(nil, v), nil
	case bool:
		return strconv.AppendBool(nil, v), nil
	case json.RawMessage:
		return session.JSValue(v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return session.JSValue(b)
}

// CompactObject returns raw, a tool's arguments, as dsh puts them in a
// payload: re-serialized by session.JSValue (JavaScript's number spelling, string
// escapes and key order), {} when raw is empty. Anything but a JSON
// object is an error.
func CompactObject(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("{}"), nil
	}
	if t := bytes.TrimSpace(raw); t[0] != '{' {
		return nil, fmt.Errorf("tool_input: not a JSON object: %.40s", t)
	}
	out, err := session.JSValue(raw)
	if err != nil {
		return nil, fmt.Errorf("tool_input: %w", err)
	}
	return out, nil
}

// CommandOf returns the "command" member of a tool's arguments the way
// dsh's Codex bridge reads it: the JSON string token (as session.JSValue spells
// it) when the arguments are an object whose command is a string, else
// `""`. Arguments that are not a JSON object are an error.
func CommandOf(raw json.RawMessage) (json.RawMessage, error) {
	input, err := CompactObject(raw)
	if err != nil {
		return nil, err
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(input, &members); err != nil {
		return nil, fmt.Errorf("tool_input: %w", err)
	}
	if c, ok := members["command"]; ok && len(c) > 0 && c[0] == '"' {
		return c, nil
	}
	return json.RawMessage(`""`), nil
}
