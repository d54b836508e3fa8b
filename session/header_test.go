package session

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

func int64p(n int64) *int64 { return &n }

func TestMarshalJSONCases(t *testing.T) {
	tests := []struct {
		name string
		h    Header
		want string
	}{
		{
			"minimal: delegationDepth always written",
			Header{ID: "s", CreatedAt: 0},
			`{"type":"session","version":0,"id":"s","createdAt":0,"delegationDepth":0}`,
		},
		{
			"every field, in dsh's key order",
			Header{ID: "child", CreatedAt: 1700000000000, Cwd: "/srv/app", ParentSession: "parent", SeedLength: int64p(12), Origin: OriginSubagent, DelegationDepth: 2, AgentPreset: "minimal"},
			`{"type":"session","version":0,"id":"child","createdAt":1700000000000,"cwd":"/srv/app","parentSession":"parent","seedLength":12,"origin":"subagent","delegationDepth":2,"agentPreset":"minimal"}`,
		},
		{
			"zero seedLength is present, not omitted",
			Header{ID: "f", CreatedAt: 1, ParentSession: "p", SeedLength: int64p(0)},
			`{"type":"session","version":0,"id":"f","createdAt":1,"parentSession":"p","seedLength":0,"delegationDepth":0}`,
		},
		{
			"no HTML escaping",
			Header{ID: "a<b>&c", CreatedAt: 1, Cwd: "/x&y<z>"},
			`{"type":"session","version":0,"id":"a<b>&c","createdAt":1,"cwd":"/x&y<z>","delegationDepth":0}`,
		},
		{
			"quotes, backslashes and control characters are escaped",
			Header{ID: "q\"\\\n\x01\b\f\x1f", CreatedAt: 1, Cwd: `/w\ork`},
			`{"type":"session","version":0,"id":"q\"\\\n\u0001\b\f\u001f","createdAt":1,"cwd":"/w\\ork","delegationDepth":0}`,
		},
		{
			"U+2028, U+2029 and DEL stay raw, as JSON.stringify writes them",
			Header{ID: "a\u2028b\u2029c\x7f", CreatedAt: 1},
			"{\"type\":\"session\",\"version\":0,\"id\":\"a\u2028b\u2029c\x7f\",\"createdAt\":1,\"delegationDepth\":0}",
		},
		{
			"non-ASCII stays literal",
			Header{ID: "会话", CreatedAt: 1, Cwd: "/开发"},
			`{"type":"session","version":0,"id":"会话","createdAt":1,"cwd":"/开发","delegationDepth":0}`,
		},
	}
	for _, tt := range tests {
		got, err := tt.h.MarshalJSON()
		if err != nil || string(got) != tt.want {
			t.Errorf("%s: MarshalJSON(%+v) = %s, %v, want %s", tt.name, tt.h, got, err, tt.want)
			continue
		}
		if strings.Contains(string(got), "null") {
			t.Errorf("%s: MarshalJSON(%+v) = %s writes null", tt.name, tt.h, got)
		}
		back, err := Parse(got)
		if err != nil || !reflect.DeepEqual(back, tt.h) {
			t.Errorf("%s: Parse(%s) = %+v, %v, want %+v", tt.name, got, back, err, tt.h)
		}
	}
}

// TestMarshalJSONThroughEncoders pins down how the header's literal
// "<", "&" survive the standard encoders: an Encoder with SetEscapeHTML
// false keeps them, while json.Marshal re-escapes Marshaler output. Code
// that writes dsh files must use MarshalJSON or such an Encoder.
func TestMarshalJSONThroughEncoders(t *testing.T) {
	h := Header{ID: "a<&>", CreatedAt: 1}
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(h); err != nil {
		t.Fatal(err)
	}
	if want := `{"type":"session","version":0,"id":"a<&>","createdAt":1,"delegationDepth":0}` + "\n"; b.String() != want {
		t.Errorf("Encoder(SetEscapeHTML(false)).Encode(%+v) = %s, want %s", h, b.String(), want)
	}
	viaMarshal, err := json.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(viaMarshal), `a\u003c\u0026\u003e`) {
		t.Errorf("json.Marshal(%+v) = %s; expected encoding/json to HTML-escape Marshaler output", h, viaMarshal)
	}
	var back Header
	if err := json.Unmarshal(viaMarshal, &back); err != nil || back.ID != h.ID {
		t.Errorf("json.Unmarshal(%s) = %+v, %v, want id %q", viaMarshal, back, err, h.ID)
	}
}

func TestMarshalJSONRefusesInvalid(t *testing.T) {
	tests := []struct {
		h     Header
		field string
	}{
		{Header{}, "id"},
		{Header{ID: "s", CreatedAt: -1}, "createdAt"},
		{Header{ID: "s", CreatedAt: 1 << 53}, "createdAt"},
		{Header{ID: "s", Cwd: "relative/dir"}, "cwd"},
		{Header{ID: "s", SeedLength: int64p(-1)}, "seedLength"},
		{Header{ID: "s", Origin: "fork"}, "origin"},
		{Header{ID: "s", DelegationDepth: -1}, "delegationDepth"},
	}
	for _, tt := range tests {
		got, err := tt.h.MarshalJSON()
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("MarshalJSON(%+v) = %s, %v, want a *FieldError for %q", tt.h, got, err, tt.field)
		}
	}
}

func TestParseCases(t *testing.T) {
	tests := []struct {
		line string
		want Header
	}{
		{`{"type":"session","version":0,"id":"s","createdAt":5}`, Header{ID: "s", CreatedAt: 5}},
		{`{"type":"session","version":0,"id":"s","createdAt":5,"delegationDepth":3}`, Header{ID: "s", CreatedAt: 5, DelegationDepth: 3}},
		{`{"createdAt":5,"id":"s","version":0,"type":"session"}`, Header{ID: "s", CreatedAt: 5}},
		{`{"type":"session","version":0,"id":"s","createdAt":5,"futureField":{"x":1}}`, Header{ID: "s", CreatedAt: 5}},
		{`{"type":"session","version":0,"id":"s","createdAt":5.0,"cwd":"/work"}`, Header{ID: "s", CreatedAt: 5, Cwd: "/work"}},
		{`{"type":"session","version":0.0,"id":"s","createdAt":1e3}`, Header{ID: "s", CreatedAt: 1000}},
		{`{"type":"session","version":-0,"id":"s","createdAt":5,"parentSession":"","agentPreset":"","seedLength":-0}`, Header{ID: "s", CreatedAt: 5, SeedLength: new(int64), EmptyParentSession: true, EmptyAgentPreset: true}},
		{`{"type":"session","version":0,"id":"s","createdAt":5,"cwd":"C:\\work\\agent"}`, Header{ID: "s", CreatedAt: 5, Cwd: `C:\work\agent`}},
		{`{"type":"session","version":0,"id":"s","id":"t","createdAt":5}`, Header{ID: "t", CreatedAt: 5}},
		{`{"type":"session","version":0,"id":"s","createdAt":9007199254740991}`, Header{ID: "s", CreatedAt: 1<<53 - 1}},
		{` {"type":"session","version":0,"id":"{{sessionId}}","createdAt":0,"parentSession":"p","origin":"subagent","delegationDepth":1} `,
			Header{ID: "{{sessionId}}", ParentSession: "p", Origin: OriginSubagent, DelegationDepth: 1}},
	}
	for _, tt := range tests {
		got, err := Parse([]byte(tt.line))
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Parse(%q) = %+v, %v, want %+v", tt.line, got, err, tt.want)
		}
	}
}

func TestParseFieldErrors(t *testing.T) {
	const ok = `"type":"session","version":0,"id":"s","createdAt":5`
	tests := []struct {
		name  string
		line  string
		field string
		class error // nil: a plain invalid value
	}{
		{"version 1", `{"type":"session","version":1,"id":"s","createdAt":5}`, "version", ErrUnsupportedVersion},
		{"version 0.5", `{"type":"session","version":0.5,"id":"s","createdAt":5}`, "version", ErrUnsupportedVersion},
		{"version missing", `{"type":"session","id":"s","createdAt":5}`, "version", nil},
		{"sandboxMode", `{` + ok + `,"sandboxMode":"read-only"}`, "sandboxMode", ErrRetiredField},
		{"approvalPolicy", `{` + ok + `,"approvalPolicy":"never"}`, "approvalPolicy", ErrRetiredField},
		{"wrong type", `{"type":"event","version":0,"id":"s","createdAt":5}`, "type", nil},
		{"no type", `{"version":0,"id":"s","createdAt":5}`, "type", nil},
		{"no id", `{"type":"session","version":0,"createdAt":5}`, "id", nil},
		{"empty id", `{"type":"session","version":0,"id":"","createdAt":5}`, "id", nil},
		{"no createdAt", `{"type":"session","version":0,"id":"s"}`, "createdAt", nil},
		{"negative createdAt", `{"type":"session","version":0,"id":"s","createdAt":-1}`, "createdAt", nil},
		{"fractional createdAt", `{"type":"session","version":0,"id":"s","createdAt":1.5}`, "createdAt", nil},
		{"unsafe createdAt", `{"type":"session","version":0,"id":"s","createdAt":9007199254740992}`, "createdAt", nil},
		{"huge createdAt", `{"type":"session","version":0,"id":"s","createdAt":1e300}`, "createdAt", nil},
		{"relative cwd", `{` + ok + `,"cwd":"work/app"}`, "cwd", nil},
		{"empty cwd", `{` + ok + `,"cwd":""}`, "cwd", nil},
		{"dot cwd", `{` + ok + `,"cwd":"."}`, "cwd", nil},
		{"null parentSession", `{` + ok + `,"parentSession":null}`, "parentSession", nil},
		{"null cwd", `{` + ok + `,"cwd":null}`, "cwd", nil},
		{"null seedLength", `{` + ok + `,"seedLength":null}`, "seedLength", nil},
		{"null origin", `{` + ok + `,"origin":null}`, "origin", nil},
		{"string createdAt", `{"type":"session","version":0,"id":"s","createdAt":"5"}`, "createdAt", nil},
		{"negative zero createdAt", `{"type":"session","version":0,"id":"s","createdAt":-0}`, "createdAt", nil},
		{"negative zero delegationDepth", `{` + ok + `,"delegationDepth":-0.0}`, "delegationDepth", nil},
		{"keys match exactly", `{"type":"session","version":0,"ID":"s","createdAt":5}`, "id", nil},
		{"string version", `{"type":"session","version":"0","id":"s","createdAt":5}`, "version", nil},
		{"drive-relative windows cwd", `{` + ok + `,"cwd":"C:work"}`, "cwd", nil},
		{"negative seedLength", `{` + ok + `,"seedLength":-2}`, "seedLength", nil},
		{"unsafe seedLength", `{` + ok + `,"seedLength":9007199254740992}`, "seedLength", nil},
		{"origin fork", `{` + ok + `,"origin":"fork"}`, "origin", nil},
		{"origin empty", `{` + ok + `,"origin":""}`, "origin", nil},
		{"negative delegationDepth", `{` + ok + `,"delegationDepth":-1}`, "delegationDepth", nil},
		{"fractional delegationDepth", `{` + ok + `,"delegationDepth":0.5}`, "delegationDepth", nil},
		{"null agentPreset", `{` + ok + `,"agentPreset":null}`, "agentPreset", nil},
	}
	for _, tt := range tests {
		got, err := Parse([]byte(tt.line))
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != tt.field {
			t.Errorf("%s: Parse(%s) = %+v, %v, want a *FieldError for %q", tt.name, tt.line, got, err, tt.field)
			continue
		}
		if tt.class != nil && !errors.Is(err, tt.class) {
			t.Errorf("%s: Parse(%s) = %v, want it to wrap %v", tt.name, tt.line, err, tt.class)
		}
		if tt.class == nil && (errors.Is(err, ErrUnsupportedVersion) || errors.Is(err, ErrRetiredField)) {
			t.Errorf("%s: Parse(%s) = %v, want a plain invalid value", tt.name, tt.line, err)
		}
		if !strings.Contains(err.Error(), `"`+tt.field+`"`) {
			t.Errorf("%s: error %q does not name the field %q", tt.name, err, tt.field)
		}
	}
}

// TestParseRetiredFieldNull: dsh refuses a retired key whatever its value
// (Object.hasOwn), null included.
func TestParseRetiredFieldNull(t *testing.T) {
	for _, line := range []string{
		`{"type":"session","version":0,"id":"s","createdAt":5,"sandboxMode":null}`,
		`{"type":"session","version":0,"id":"s","createdAt":5,"approvalPolicy":null}`,
	} {
		if _, err := Parse([]byte(line)); !errors.Is(err, ErrRetiredField) {
			t.Errorf("Parse(%s) = %v, want ErrRetiredField", line, err)
		}
	}
}

func TestParseSyntaxErrors(t *testing.T) {
	for _, line := range []string{``, `{`, `[]`, `"session"`, `{"type":"session","version":0,"id":"s","createdAt":5} {}`, `{"type":"session","version":0,"id":7,"createdAt":5}`} {
		if got, err := Parse([]byte(line)); err == nil {
			t.Errorf("Parse(%q) = %+v, nil, want an error", line, got)
		}
	}
}

func TestUnmarshalJSONValidates(t *testing.T) {
	var h Header
	err := json.Unmarshal([]byte(`{"type":"session","version":1,"id":"s","createdAt":5}`), &h)
	if !errors.Is(err, ErrUnsupportedVersion) {
		t.Fatalf("json.Unmarshal(version 1) = %v, want ErrUnsupportedVersion", err)
	}
	if err := json.Unmarshal([]byte(`{"type":"session","version":0,"id":"s","createdAt":5,"cwd":"/w"}`), &h); err != nil || h.Cwd != "/w" {
		t.Fatalf("json.Unmarshal(valid) = %+v, %v", h, err)
	}
}

// TestValidateCwd: a cwd is absolute by POSIX or by Windows rules, so a
// log dsh wrote on Windows loads here; a relative or drive-relative path
// is refused.
func TestValidateCwd(t *testing.T) {
	for _, cwd := range []string{"/", "/srv/app", "//x", "/a/../b", `C:\work\agent`, `d:/src`, `\\server\share`, `\work`} {
		if err := (Header{ID: "s", Cwd: cwd}).Validate(); err != nil {
			t.Errorf("Validate(cwd %q) = %v, want nil", cwd, err)
		}
	}
	for _, cwd := range []string{`C:`, `C:work`, `1:\x`, `work`, "./x", "~/x"} {
		if err := (Header{ID: "s", Cwd: cwd}).Validate(); err == nil {
			t.Errorf("Validate(cwd %q) = nil, want an error", cwd)
		}
	}
}

// TestEmptyStringsKept: "parentSession": "" and "agentPreset": "" load
// and are written back as dsh keeps them.
func TestEmptyStringsKept(t *testing.T) {
	line := `{"type":"session","version":0,"id":"s","createdAt":5,"parentSession":"","delegationDepth":0,"agentPreset":""}`
	h, err := Parse([]byte(line))
	if err != nil || !h.EmptyParentSession || !h.EmptyAgentPreset {
		t.Fatalf("Parse(%s) = %+v, %v; want both empty strings kept", line, h, err)
	}
	if out, err := h.MarshalJSON(); err != nil || string(out) != line {
		t.Errorf("MarshalJSON() = %s, %v; want %s", out, err, line)
	}
	absent := `{"type":"session","version":0,"id":"s","createdAt":5,"delegationDepth":0}`
	if h, err := Parse([]byte(absent)); err != nil || h.EmptyParentSession || h.EmptyAgentPreset {
		t.Errorf("Parse(%s) = %+v, %v; want no key kept", absent, h, err)
	}
}

func TestFieldErrorUnwrap(t *testing.T) {
	fe := &FieldError{Field: "version", Reason: "x", Err: ErrUnsupportedVersion}
	if !errors.Is(fe, ErrUnsupportedVersion) || errors.Is(fe, ErrRetiredField) {
		t.Errorf("errors.Is(%v) classes wrong", fe)
	}
	if errors.Unwrap(&FieldError{Field: "id"}) != nil {
		t.Error("a plain FieldError unwraps to a class")
	}
}
