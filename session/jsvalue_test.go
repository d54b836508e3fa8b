package session

import (
	"encoding/json"
	"testing"
)

// TestJSValueCase: the JSON text JSON.parse then JSON.stringify makes of
// raw (the expected values were produced by Node 22).
func TestJSValueCase(t *testing.T) {
	tests := []struct{ in, want string }{
		{`{ "a" : 1 }`, `{"a":1}`},
		{`{"b":1.0,"a":1.50,"c":-0,"d":2e2}`, `{"b":1,"a":1.5,"c":0,"d":200}`},
		{`[1e21,1e20,0.000001,0.0000001,1E-7,123456789012345678901234567890]`, `[1e+21,100000000000000000000,0.000001,1e-7,1e-7,1.2345678901234568e+29]`},
		{`[5e-324,1.7976931348623157e308,1e400,-1e400,1e-400,0.1,4.35,9007199254740993]`, `[5e-324,1.7976931348623157e+308,null,null,0,0.1,4.35,9007199254740992]`},
		// Array-index keys first, ascending; then insertion order; a
		// repeated key keeps its first place and its last value.
		{`{"b":1,"10":2,"a":3,"2":4,"01":5,"-1":6,"4294967294":7,"4294967295":8,"b":9}`,
			`{"2":4,"10":2,"4294967294":7,"b":9,"a":3,"01":5,"-1":6,"4294967295":8}`},
		// Escapes as JSON.stringify writes them; U+2028 raw; a lone
		// surrogate stays an escape; "\/" and "\u0061" are plain.
		{`"caf\u00e9 \/ \u0061 \ud83d\ude00 \u2028 \u001F \b \f \u007f <&>"`, "\"café / a 😀 \u2028 \\u001f \\b \\f \x7f <&>\""},
		{`"lone \ud800 \udc00x \uDBFF"`, `"lone \ud800 \udc00x \udbff"`},
		{`{"comm\u0061nd":"ls","__proto__":{"x":[true,false,null]}}`, `{"command":"ls","__proto__":{"x":[true,false,null]}}`},
		{` [ ] `, `[]`},
		{`{}`, `{}`},
	}
	for _, tt := range tests {
		got, err := JSValue([]byte(tt.in))
		if err != nil || string(got) != tt.want {
			t.Errorf("JSValue(%s) = %s, %v, want %s", tt.in, got, err, tt.want)
		}
		if err == nil && !json.Valid(got) {
			t.Errorf("JSValue(%s) = %s is not valid JSON", tt.in, got)
		}
	}
	for _, bad := range []string{``, `{`, `{"a":}`, "\"\xff\"", `{"a":1}x`} {
		if got, err := JSValue([]byte(bad)); err == nil {
			t.Errorf("JSValue(%q) = %s, want an error", bad, got)
		}
	}
}
