package hooks

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	Payload(ev Event, loc Locator) ([]byte, error)
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
	// Substitute lists variables whose ${NAME} in a command is replaced
	// by the value Env gives them (when it gives one).
	Substitute []string
}

// Field is one key of a payload object, in the order it is written.
type Field struct {
	Key   string
	Value any
}

// EncodeObject writes fields as one compact JSON object, keys in the given
// order, without HTML escaping (`<`, `>` and `&` stay literal). A value
// that does not encode is an error naming its key.
func EncodeObject(fields ...Field) ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := marshal(f.Key)
		if err != nil {
			return nil, fmt.Errorf("payload key %q: %w", f.Key, err)
		}
		b.Write(k)
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

// marshal encodes v compactly without HTML escaping.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// CompactObject returns raw as compact JSON without HTML escaping, or {}
// when raw is empty. Anything but a JSON object is an error.
func CompactObject(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return json.RawMessage("{}"), nil
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("tool_input: not a JSON object: %w", err)
	}
	if probe == nil {
		return nil, fmt.Errorf("tool_input: not a JSON object: null")
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return nil, fmt.Errorf("tool_input: %w", err)
	}
	return b.Bytes(), nil
}
