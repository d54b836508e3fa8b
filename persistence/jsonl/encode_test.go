package jsonl

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
)

func TestAppendStringCases(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"plain", `"plain"`},
		{"<a href='x'>&</a>", `"<a href='x'>&</a>"`},
		{`q"b\s`, `"q\"b\\s"`},
		{"\n\r\t\x00\x1f\b\f\x7f", "\"\\n\\r\\t\\u0000\\u001f\\b\\f\x7f\""},
		{"开发 é", `"开发 é"`},
		// JSON.stringify writes U+2028/U+2029 raw; a byte that is not
		// UTF-8 is the U+FFFD a UTF-8 decoder makes of it.
		{"\u2028\u2029", "\"\u2028\u2029\""},
		{"bad\xffutf8", "\"bad\uFFFDutf8\""},
		{"", `""`},
	}
	for _, tt := range tests {
		got := string(appendString(nil, tt.in))
		if got != tt.want {
			t.Errorf("appendString(%q) = %s, want %s", tt.in, got, tt.want)
		}
		var back string
		if err := json.Unmarshal([]byte(got), &back); err != nil || back != strings.ToValidUTF8(tt.in, "\uFFFD") {
			t.Errorf("json.Unmarshal(%s) = %q, %v, want %q", got, back, err, tt.in)
		}
	}
}

func TestPackableCases(t *testing.T) {
	chunk := func(data string) persistence.Event {
		return persistence.Event{Type: "assistant/chunk", Seq: 0, Time: 1, Data: []byte(data)}
	}
	tests := []struct {
		name string
		e    persistence.Event
		ok   bool
	}{
		{"text delta", chunk(`{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a"}}`), true},
		{"reasoning delta", chunk(`{"turn":1,"step":2,"chunk":{"type":"reasoning-delta","index":0,"text":"a"}}`), true},
		{"tool delta with name", chunk(`{"turn":1,"step":2,"chunk":{"type":"tool-call-delta","index":1,"id":"c","name":"n","argumentsDelta":"{"}}`), true},
		{"tool delta without name", chunk(`{"turn":1,"step":2,"chunk":{"type":"tool-call-delta","index":1,"id":"c","argumentsDelta":"{"}}`), true},
		{"tool delta with empty id", chunk(`{"turn":1,"step":2,"chunk":{"type":"tool-call-delta","index":1,"id":"","argumentsDelta":"{"}}`), false},
		{"tool delta with empty name", chunk(`{"turn":1,"step":2,"chunk":{"type":"tool-call-delta","index":1,"id":"c","name":"","argumentsDelta":"{"}}`), false},
		{"tool delta with null name", chunk(`{"turn":1,"step":2,"chunk":{"type":"tool-call-delta","index":1,"id":"c","name":null,"argumentsDelta":"{"}}`), false},
		{"keys in another order", chunk(`{"step":2,"turn":1,"chunk":{"type":"text-delta","index":0,"text":"a"}}`), false},
		{"extra key", chunk(`{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a","x":1}}`), false},
		{"text on a tool delta", chunk(`{"turn":1,"step":2,"chunk":{"type":"tool-call-delta","index":1,"id":"c","text":"a","argumentsDelta":"{"}}`), false},
		{"non-string text", chunk(`{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":1}}`), false},
		{"fractional turn", chunk(`{"turn":1.0,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a"}}`), false},
		{"negative index", chunk(`{"turn":1,"step":2,"chunk":{"type":"text-delta","index":-1,"text":"a"}}`), false},
		{"other chunk type", chunk(`{"turn":1,"step":2,"chunk":{"type":"block-start","index":0,"blockType":"text"}}`), false},
		{"other event type", persistence.Event{Type: "x", Data: []byte(`{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a"}}`)}, false},
		{"ignorable", persistence.Event{Type: "assistant/chunk", Ignorable: true, Data: []byte(`{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a"}}`)}, false},
		{"surfaceOp", persistence.Event{Type: "assistant/chunk", SurfaceOp: []byte(`"append"`), Data: []byte(`{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a"}}`)}, false},
		{"unsafe time", persistence.Event{Type: "assistant/chunk", Time: 1 << 60, Data: []byte(`{"turn":1,"step":2,"chunk":{"type":"text-delta","index":0,"text":"a"}}`)}, false},
	}
	for _, tt := range tests {
		if _, ok := packable(&tt.e); ok != tt.ok {
			t.Errorf("%s: packable(%s) = %v, want %v", tt.name, tt.e.Data, ok, tt.ok)
		}
	}
}

func TestScanEscapedTypeAndKeys(t *testing.T) {
	raw := testHeader + "\n" + `{"\u0074ype":"user\/message","seq":0,"time":1,"data":{}}` + "\n"
	_, events, err := scanAll([]byte(raw))
	if err != nil || len(events) != 1 || events[0].Type != "user/message" {
		t.Fatalf("Scan(escaped key and type) = %+v, %v; want one user/message", events, err)
	}
}
