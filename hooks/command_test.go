package hooks

import (
	"encoding/json"
	"testing"
)

// TestCommandOfCase: the command dsh's Codex bridge sends: the string, or
// "" when the command is missing or not a string; arguments that are not
// an object are refused.
func TestCommandOfCase(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{"command":"ls -l"}`, `"ls -l"`},
		{`{"command":"a\u2028b"}`, "\"a\u2028b\""},
		{`{"command":5}`, `""`},
		{`{"command":null}`, `""`},
		{`{"command":["ls"]}`, `""`},
		{`{"cmd":"ls"}`, `""`},
		{`{"command":1,"command":"last"}`, `"last"`},
		{``, `""`},
	}
	for _, tt := range tests {
		got, err := CommandOf(json.RawMessage(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("CommandOf(%s) = %s, %v, want %s", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{`["ls"]`, `"ls"`, `null`, `{`} {
		if got, err := CommandOf(json.RawMessage(bad)); err == nil {
			t.Errorf("CommandOf(%s) = %s, want an error", bad, got)
		}
	}
}
