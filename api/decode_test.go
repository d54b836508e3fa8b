package api

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/childenv"
)

func TestDecodeRunBadInput(t *testing.T) {
	cases := []struct {
		name, body, field string
	}{
		{"Malformed", `{"policy":"ci","command":`, "body"},
		{"NotAnObject", `[1,2]`, "body"},
		{"Empty", ``, "body"},
		{"Trailing", `{"policy":"ci","command":"true"} {}`, "body"},
		{"UnknownField", `{"policy":"ci","command":"true","transcriptDir":"/x"}`, "transcriptDir"},
		{"DSHEnvList", `{"policy":"ci","command":"true","dshEnv":["DSH_HOME=/x"]}`, "dshEnv"},
		{"DSHEnvNumber", `{"policy":"ci","command":"true","dshEnv":{"DSH_HOME":1}}`, "dshEnv"},
		{"DSHEnvLowerKey", `{"policy":"ci","command":"true","dshEnv":{"dsh_home":"/x"}}`, "dshEnv.dsh_home"},
		{"DSHEnvNoPrefix", `{"policy":"ci","command":"true","dshEnv":{"PATH":"/x"}}`, "dshEnv.PATH"},
		{"DSHEnvBarePrefix", `{"policy":"ci","command":"true","dshEnv":{"DSH_":"x"}}`, "dshEnv.DSH_"},
		{"DSHEnvEqualsInKey", `{"policy":"ci","command":"true","dshEnv":{"DSH_A=B":"x"}}`, "dshEnv.DSH_A=B"},
		{"DSHEnvNulKey", `{"policy":"ci","command":"true","dshEnv":{"DSH_A\u0000":"x"}}`, "dshEnv[0]"},
		{"DSHEnvNulValue", `{"policy":"ci","command":"true","dshEnv":{"DSH_HOME":"/x\u0000"}}`, "dshEnv.DSH_HOME"},
		{"DSHEnvLongValue", `{"policy":"ci","command":"true","dshEnv":{"DSH_X":"` + strings.Repeat("v", MaxDSHEnvValueBytes+1) + `"}}`, "dshEnv.DSH_X"},
		{"DSHEnvTooMany", `{"policy":"ci","command":"true","dshEnv":{` + manyDSHKeys(MaxDSHEnvKeys+1) + `}}`, "dshEnv"},
		{"WrongType", `{"policy":"ci","command":"true","timeoutMs":"5"}`, "timeoutMs"},
		{"NegativeTimeout", `{"policy":"ci","command":"true","timeoutMs":-1}`, "timeoutMs"},
		{"NoPolicy", `{"command":"true"}`, "policy"},
		{"NoCommand", `{"policy":"ci"}`, "command"},
		{"NulCommand", `{"policy":"ci","command":"a\u0000b"}`, "command"},
		{"DSHEnv", `{"policy":"ci","command":"true","env":["dsh_home=/x"]}`, "env[0]"},
		{"BadEnv", `{"policy":"ci","command":"true","env":["A=1","=x"]}`, "env[1]"},
		{"RelativeWorkdir", `{"policy":"ci","command":"true","workdir":"tmp"}`, "workdir"},
		{"RelativeCwd", `{"policy":"ci","command":"true","cwd":"x"}`, "cwd"},
		{"HugeTail", `{"policy":"ci","command":"true","stdoutMaxBytes":999999999}`, "stdoutMaxBytes"},
		{"HeaderRelativeCwd", `{"policy":"ci","command":"true","session":{"type":"session","version":0,"id":"s","createdAt":0,"cwd":"rel"}}`, "session.cwd"},
		{"HeaderEmptyID", `{"policy":"ci","command":"true","session":{"type":"session","version":0,"id":"","createdAt":0}}`, "session.id"},
		{"HeaderVersion1", `{"policy":"ci","command":"true","session":{"type":"session","version":1,"id":"s","createdAt":0}}`, "session.version"},
		{"HeaderRetired", `{"policy":"ci","command":"true","session":{"type":"session","version":0,"id":"s","createdAt":0,"sandboxMode":"x"}}`, "session.sandboxMode"},
		{"HeaderNotObject", `{"policy":"ci","command":"true","session":"s1"}`, "session"},
		{"NulSessionID", `{"policy":"ci","command":"true","session":{"type":"session","version":0,"id":"a\u0000b","createdAt":0}}`, "session.id"},
		{"NulSessionCwd", `{"policy":"ci","command":"true","session":{"type":"session","version":0,"id":"s","createdAt":0,"cwd":"/a\u0000"}}`, "session.cwd"},
		{"NulParent", `{"policy":"ci","command":"true","session":{"type":"session","version":0,"id":"s","createdAt":0,"parentSession":"\u0000"}}`, "session.parentSession"},
		{"NulPolicy", `{"policy":"c\u0000i","command":"true"}`, "policy"},
		{"NulWorkdir", `{"policy":"ci","command":"true","workdir":"/a\u0000"}`, "workdir"},
		{"NulCallID", `{"policy":"ci","command":"true","callId":"\u0000"}`, "callId"},
		{"LongSessionID", `{"policy":"ci","command":"true","session":{"type":"session","version":0,"id":"` + strings.Repeat("a", 3000) + `","createdAt":0}}`, "session.id"},
		{"LongCwdComponent", `{"policy":"ci","command":"true","cwd":"/` + strings.Repeat("a", 256) + `"}`, "cwd"},
		{"LongSessionCwd", `{"policy":"ci","command":"true","session":{"type":"session","version":0,"id":"s","createdAt":0,"cwd":"` + strings.Repeat("/a", 2100) + `"}}`, "session.cwd"},
		{"LongMountTarget", `{"policy":"ci","command":"true","mounts":[{"source":"/srv","target":"/` + strings.Repeat("t", 300) + `"}]}`, "mounts[0].target"},
		{"CwdWithSession", `{"policy":"ci","command":"true","cwd":"/a","session":{"type":"session","version":0,"id":"s","createdAt":0,"cwd":"/b"}}`, "cwd"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := DecodeRun(strings.NewReader(tc.body))
			if err == nil {
				t.Fatalf("DecodeRun(%q) = %+v, nil; want an error naming %s", tc.body, req, tc.field)
			}
			var fe *types.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field {
				t.Errorf("DecodeRun(%q) error = %v, want a types.FieldError for %q", tc.body, err, tc.field)
			}
			if !errors.Is(err, sandbox.ErrInvalid) || HTTPStatus(err) != 400 {
				t.Errorf("DecodeRun(%q): HTTPStatus(%v) = %d, want 400", tc.body, err, HTTPStatus(err))
			}
		})
	}
}

// manyDSHKeys is n JSON members "DSH_K<i>":"v".
func manyDSHKeys(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"DSH_K%d":"v"`, i)
	}
	return strings.Join(parts, ",")
}

func TestDecodeRunValid(t *testing.T) {
	body := `{"policy":"ci","command":"echo hi","timeoutMs":5000,"env":["A=1"],"stdin":"aGk=",
		"session":{"type":"session","version":0,"id":"s1","createdAt":5,"cwd":"/w","futureKey":1},
		"dshEnv":{"DSH_HOME":"/h","DSH_X_2":"a=b\nc"}}`
	req, err := DecodeRun(strings.NewReader(body))
	if err != nil {
		t.Fatalf("DecodeRun(%q) = %v, want nil", body, err)
	}
	if req.Session == nil || req.Session.ID != "s1" || req.Session.Cwd != "/w" || string(req.Stdin) != "hi" || req.TimeoutMs != 5000 {
		t.Errorf("DecodeRun(%q) = %+v, want session s1 in /w, stdin hi, timeout 5000", body, req)
	}
	if len(req.DSHEnv) != 2 || req.DSHEnv["DSH_HOME"] != "/h" || req.DSHEnv["DSH_X_2"] != "a=b\nc" {
		t.Errorf("DecodeRun(%q).DSHEnv = %q, want DSH_HOME and DSH_X_2", body, req.DSHEnv)
	}
	full := `{"policy":"ci","command":"true","dshEnv":{` + manyDSHKeys(MaxDSHEnvKeys) + `}}`
	if _, err := DecodeRun(strings.NewReader(full)); err != nil {
		t.Errorf("DecodeRun(%d dshEnv keys) = %v, want nil", MaxDSHEnvKeys, err)
	}
}

func TestHTTPStatusClasses(t *testing.T) {
	cases := []struct {
		err  error
		want int
	}{
		{sandbox.Errorf(sandbox.ErrInvalid, "x"), 400},
		{sandbox.Errorf(sandbox.ErrNotFound, "x"), 404},
		{sandbox.Errorf(sandbox.ErrUnavailable, "x"), 503},
		{sandbox.Errorf(sandbox.ErrInternal, "x"), 500},
		{errors.New("plain"), 500},
		{types.ErrOverloaded, 429},
		{types.ErrUnauthorized, 401},
	}
	for _, tc := range cases {
		if got := HTTPStatus(tc.err); got != tc.want {
			t.Errorf("HTTPStatus(%q) = %d, want %d", tc.err, got, tc.want)
		}
		// The class survives the round trip through an ErrorBody.
		if got := HTTPStatus(types.Body(tc.err).Err()); got != tc.want {
			t.Errorf("HTTPStatus(types.Body(%q).Err()) = %d, want %d", tc.err, got, tc.want)
		}
	}
}

func FuzzDecodeRun(f *testing.F) {
	for _, s := range []string{
		`{"policy":"ci","command":"true"}`,
		`{"policy":"ci","command":"true","session":{"type":"session","version":0,"id":"s","createdAt":0,"cwd":"/x"}}`,
		`{"policy":"ci","command":"x","env":["A=1","DSH_X=2"],"timeoutMs":-1}`,
		`{"stdin":"aGk=","callId":"c"}`, `[`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := DecodeRun(strings.NewReader(string(data)))
		if err != nil {
			if !errors.Is(err, sandbox.ErrInvalid) {
				t.Fatalf("DecodeRun(%q) error %v is not ErrInvalid", data, err)
			}
			return
		}
		// Whatever decodes must satisfy the trust boundary.
		if req.Policy == "" || req.TimeoutMs < 0 || strings.TrimSpace(req.Command) == "" {
			t.Fatalf("DecodeRun(%q) accepted %+v", data, req)
		}
		for _, kv := range req.Env {
			name, _, _ := strings.Cut(kv, "=")
			if name == "" || childenv.IsDSHName(name) {
				t.Fatalf("DecodeRun(%q) accepted env %q", data, kv)
			}
		}
		if req.Session != nil {
			if strings.ContainsRune(req.Session.ID+req.Session.Cwd+req.Session.ParentSession+req.Session.AgentPreset, 0) {
				t.Fatalf("DecodeRun(%q) accepted a NUL in the session header", data)
			}
			if err := req.Session.Validate(); err != nil {
				t.Fatalf("DecodeRun(%q) accepted an invalid header: %v", data, err)
			}
		}
	})
}
