package childenv

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

var terminalOnly = []string{"GIT_PAGER=cat", "NO_COLOR=1", "PAGER=cat", "TERM=dumb"}

func withTerminal(entries ...string) []string {
	out := append(slices.Clone(terminalOnly), entries...)
	slices.SortFunc(out, func(a, b string) int {
		an, _, _ := strings.Cut(a, "=")
		bn, _, _ := strings.Cut(b, "=")
		return strings.Compare(an, bn)
	})
	return out
}

func TestBuildEnvLayers(t *testing.T) {
	hostile := fixtures.MapEnv(
		"DSH_STALE=stale-from-outer-harness",
		"DSH_SESSION_ID=fake-session",
		"dsh_x=lower",
		"OPENAI_API_KEY=sk-secret",
		"GITHUB_TOKEN=ghp",
		"DB_PASSWORD=pw",
		"AWS_SECRET_ACCESS_KEY=aws",
		"GOOGLE_APPLICATION_CREDENTIALS=/creds.json",
		"LD_PRELOAD=/evil.so",
		"ld_library_path=/evil",
		"LANG=C.UTF-8",
		"TZ=UTC",
		"TERM=xterm-256color",
	)
	snapshot := []string{"DSH_HOME=/home/u/.dsh", "DSH_SESSION_ID=real", "DSH_SHELL=1"}
	tests := []struct {
		name string
		in   Input
		want []string
	}{
		{
			name: "zero value is terminal settings only",
			want: terminalOnly,
		},
		{
			name: "base then terminal then ordinary then snapshot",
			in: Input{
				Base:     []string{"PATH=/usr/bin:/bin", "HOME=/tmp", "TERM=vt100"},
				Ordinary: []string{"GOFLAGS=-mod=mod", "PAGER=less"},
				Snapshot: snapshot,
			},
			want: []string{
				"DSH_HOME=/home/u/.dsh", "DSH_SESSION_ID=real", "DSH_SHELL=1",
				"GIT_PAGER=cat", "GOFLAGS=-mod=mod", "HOME=/tmp", "NO_COLOR=1",
				"PAGER=less", "PATH=/usr/bin:/bin", "TERM=dumb",
			},
		},
		{
			name: "stale and fake DSH_* in getenv never reach the child",
			in: Input{
				Inherit:  []string{"DSH_STALE", "DSH_SESSION_ID", "dsh_x", "LANG"},
				Getenv:   hostile,
				Snapshot: snapshot,
			},
			want: withTerminal("DSH_HOME=/home/u/.dsh", "DSH_SESSION_ID=real", "DSH_SHELL=1", "LANG=C.UTF-8"),
		},
		{
			name: "stale and fake DSH_* in base are dropped",
			in: Input{
				Base:     []string{"DSH_STALE=1", "DSH_SESSION_ID=fake", "dsh_x=1", "Dsh_Home=/x", "PATH=/bin"},
				Snapshot: []string{"DSH_SHELL=1"},
			},
			want: withTerminal("DSH_SHELL=1", "PATH=/bin"),
		},
		{
			name: "stale and fake DSH_* in ordinary are dropped",
			in: Input{
				Ordinary: []string{"DSH_STALE=1", "DSH_SESSION_ID=fake", "dsh_x=1", "A=b"},
				Snapshot: []string{"DSH_SESSION_ID=real"},
			},
			want: withTerminal("A=b", "DSH_SESSION_ID=real"),
		},
		{
			name: "absent from snapshot means absent, never inherited",
			in: Input{
				Base:     []string{"DSH_SESSION_JSONL=/old/session.jsonl"},
				Inherit:  []string{"DSH_SESSION_JSONL"},
				Getenv:   fixtures.MapEnv("DSH_SESSION_JSONL=/stale.jsonl"),
				Ordinary: []string{"DSH_SESSION_JSONL=/other.jsonl"},
			},
			want: terminalOnly,
		},
		{
			name: "secret-shaped and LD_* names are not inherited even when listed",
			in: Input{
				Inherit: []string{"OPENAI_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY",
					"GOOGLE_APPLICATION_CREDENTIALS", "LD_PRELOAD", "ld_library_path", "TZ"},
				Getenv: hostile,
			},
			want: withTerminal("TZ=UTC"),
		},
		{
			name: "inherited TERM loses to terminal settings",
			in:   Input{Inherit: []string{"TERM"}, Getenv: hostile},
			want: terminalOnly,
		},
		{
			name: "missing inherited name and nil getenv are left out",
			in:   Input{Inherit: []string{"NOPE", "LANG"}},
			want: terminalOnly,
		},
		{
			name: "later entry of one layer wins and names are case-sensitive",
			in:   Input{Base: []string{"A=1", "a=2", "A=3"}},
			want: withTerminal("A=3", "a=2"),
		},
		{
			name: "empty values and values with = are kept",
			in:   Input{Ordinary: []string{"EMPTY=", "EQ=a=b=c"}},
			want: withTerminal("EMPTY=", "EQ=a=b=c"),
		},
		{
			name: "sorted by name, not by entry",
			in:   Input{Base: []string{"A_B=1", "A=2", "AB=3"}},
			want: withTerminal("A=2", "AB=3", "A_B=1"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Build(tt.in)
			if err != nil {
				t.Fatalf("Build(%+v) error: %v", tt.in, err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Build(%+v) = %q, want %q", tt.in, got, tt.want)
			}
			for _, e := range got {
				if IsDSHName(e) && !slices.Contains(tt.in.Snapshot, e) {
					t.Errorf("Build(%+v) has %q, which is not from the snapshot", tt.in, e)
				}
			}
		})
	}
}

func TestBuildEnvInvalid(t *testing.T) {
	tests := []struct {
		name    string
		in      Input
		mention string // the error must name this
		secret  string // the error must not contain this
	}{
		{"NUL in ordinary value", Input{Ordinary: []string{"A=b\x00c"}}, `"A"`, "b\x00c"},
		{"NUL in base value", Input{Base: []string{"PATH=/bin\x00/evil"}}, `"PATH"`, "/evil"},
		{"NUL in snapshot value", Input{Snapshot: []string{"DSH_HOME=/h\x00x"}}, `"DSH_HOME"`, "/h"},
		{"NUL in name", Input{Ordinary: []string{"A\x00B=v"}}, `"A\x00B"`, "=v"},
		{"NUL in inherited value", Input{Inherit: []string{"LANG"}, Getenv: fixtures.MapEnv("LANG=C\x00x")}, `"LANG"`, "C\x00x"},
		{"empty name", Input{Ordinary: []string{"=value"}}, "empty variable name", "value"},
		{"no = in entry", Input{Ordinary: []string{"sk-live-secret"}}, "env[0]", "sk-live-secret"},
		{"no = in base entry", Input{Base: []string{"PATH=/bin", "oops"}}, "image env[1]", "oops"},
		{"= in inherited name", Input{Inherit: []string{"A=B"}}, `"A=B"`, "\x00"},
		{"empty inherited name", Input{Inherit: []string{""}}, "env.inherit", "\x00"},
		{"NUL in inherited name", Input{Inherit: []string{"A\x00"}}, `"A\x00"`, "\x01"},
		{"snapshot outside DSH_", Input{Snapshot: []string{"PATH=/evil"}}, `"PATH"`, "/evil"},
		{"lower-case snapshot name", Input{Snapshot: []string{"dsh_home=/x"}}, `"dsh_home"`, "/x"},
		{"NUL even in a dropped DSH_ entry", Input{Ordinary: []string{"DSH_X=a\x00"}}, `"DSH_X"`, "a\x00"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Build(tt.in)
			if !errors.Is(err, sandbox.ErrInvalid) {
				t.Fatalf("Build(%+v) = %q, %v, want an error wrapping ErrInvalid", tt.in, got, err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("Build(%+v) error %q does not name %q", tt.in, err, tt.mention)
			}
			if strings.Contains(err.Error(), tt.secret) {
				t.Errorf("Build(%+v) error %q reveals the value %q", tt.in, err, tt.secret)
			}
		})
	}
}

func TestBuildEnvDoesNotModifyInput(t *testing.T) {
	base := []string{"Z=1", "A=2"}
	ord := []string{"DSH_X=1", "B=3"}
	in := Input{Base: base, Ordinary: ord}
	if _, err := Build(in); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(base, []string{"Z=1", "A=2"}) || !slices.Equal(ord, []string{"DSH_X=1", "B=3"}) {
		t.Errorf("Build modified its input: base %q, ordinary %q", base, ord)
	}
}

func TestInheritable(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"LANG", true},
		{"TZ", true},
		{"PATH", true},
		{"HTTP_PROXY", true},
		{"OPENAI_API_KEY", false},
		{"openai_api_key", false},
		{"KEYBOARD", false}, // substring match: better safe
		{"MY_Token_FILE", false},
		{"PASSWORD", false},
		{"X_SECRET", false},
		{"AWS_CREDENTIALS_FILE", false},
		{"LD_PRELOAD", false},
		{"ld_preload", false},
		{"LDFLAGS", true},
		{"DSH_HOME", false},
		{"dsh_home", false},
		{"DSHX", true},
		// The broader filter of issue 10.
		{"GH_PAT", false},
		{"NPM_AUTH", false},
		{"npm_auth", false},
		{"BASIC_AUTH_USER", false},
		{"GITHUB_AUTH_TOKEN", false},
		{"SENTRY_DSN", false},
		{"SSH_PRIVATE_KEY_FILE", false},
		{"GPG_PRIVATE", false},
		{"LDAP_PASSWD", false},
		{"DB_PWD", false},
		{"MYSQL_PASS", false},
		{"REDIS_SESSION_KEY", false},
		{"GIT_CREDS", false},
		{"SESSION_COOKIE", false},
		{"HTTP_AUTHORIZATION", false},
		{"AZURE_STORAGE_CONNECTION_STRING", false},
		// Legitimate names that look close.
		{"PWD", true},
		{"OLDPWD", true},
		{"GIT_AUTHOR_NAME", true},
		{"GIT_AUTHOR_EMAIL", true},
		{"PATHEXT", true},
		{"SSL_CERT_FILE", true},
		{"NODE_EXTRA_CA_CERTS", true},
		{"PASSAGE", true},
		{"DATABASE_URL", true}, // its value is checked by SecretValue
	}
	for _, tt := range tests {
		if got := Inheritable(tt.name); got != tt.want {
			t.Errorf("Inheritable(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestIsDSHName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"DSH_HOME", true},
		{"dsh_x", true},
		{"Dsh_", true},
		{"DSH", false},
		{"DSHX_A", false},
		{"X_DSH_A", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := IsDSHName(tt.name); got != tt.want {
			t.Errorf("IsDSHName(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// benchEnvInput is a realistic call (fixtures.BenchEnv).
func benchEnvInput() Input {
	e := fixtures.BenchEnv()
	return Input{Base: e.Base, Inherit: e.Inherit, Getenv: e.Getenv, Ordinary: e.Ordinary, Snapshot: e.Snapshot}
}

func BenchmarkBuildEnv(b *testing.B) {
	in := benchEnvInput()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Build(in); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSecretValueCase(t *testing.T) {
	tests := []struct {
		value string
		want  bool
	}{
		{"postgres://u:p@h/db", true},
		{"postgresql://app:s3cr%40t@db.internal:5432/app?sslmode=require", true},
		{"redis://:hunter2@cache:6379/0", true},
		{"mysql://root:pa/ss@h/db", true}, // an unescaped "/" in the password
		{"https://x-access:ghp_abc@github.com/o/r.git", true},
		{"one http://a.example ; two amqp://guest:guest@mq", true}, // the second URL
		{"host=db user=app password=hunter2", true},
		{"DefaultEndpointsProtocol=https;AccountName=a;AccountKey=abc==;", true},
		{"Server=db;Uid=app;Pwd=hunter2;", true},
		// Legitimate values.
		{"postgres://h/db", false},
		{"ssh://git@github.com/o/r.git", false}, // a user name, no password
		{"http://proxy.internal:3128", false},
		{"en_US.UTF-8", false},
		{"/usr/local/bin:/usr/bin:/bin", false},
		{"user@example.com", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := SecretValue(tt.value); got != tt.want {
			t.Errorf("SecretValue(%q) = %v, want %v", tt.value, got, tt.want)
		}
	}
}

// The service's hostile environment of issue 10: a policy that inherits
// all of it passes only LANG; env.allowSecrets passes the names it lists
// (and only those, and never DSH_* or LD_*).
func TestBuildEnvSecretFilterAndAllow(t *testing.T) {
	service := map[string]string{
		"DATABASE_URL": "postgres://u:p@h/db", "GH_PAT": "x", "NPM_AUTH": "y", "SENTRY_DSN": "z",
		"LANG": "C", "LD_PRELOAD": "/evil.so", "DSH_HOME": "/h",
	}
	getenv := func(k string) (string, bool) { v, ok := service[k]; return v, ok }
	inherit := []string{"DATABASE_URL", "GH_PAT", "NPM_AUTH", "SENTRY_DSN", "LANG", "LD_PRELOAD", "DSH_HOME"}
	tests := []struct {
		allow []string
		want  []string
	}{
		{nil, []string{"LANG=C"}},
		{[]string{"DATABASE_URL"}, []string{"DATABASE_URL=postgres://u:p@h/db", "LANG=C"}},
		{[]string{"GH_PAT", "SENTRY_DSN"}, []string{"GH_PAT=x", "LANG=C", "SENTRY_DSN=z"}},
		{[]string{"LD_PRELOAD", "DSH_HOME"}, []string{"LANG=C"}},
	}
	for _, tt := range tests {
		env, err := Build(Input{Inherit: inherit, AllowSecrets: tt.allow, Getenv: getenv})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, kv := range env {
			if !slices.Contains(terminalEnv[:], kv) {
				got = append(got, kv)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("Build(inherit all, allowSecrets %q) = %q, want %q", tt.allow, got, tt.want)
		}
	}
	// allowSecrets without inherit passes nothing.
	env, err := Build(Input{AllowSecrets: []string{"GH_PAT"}, Getenv: getenv})
	if err != nil || slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GH_PAT=") }) {
		t.Errorf("Build(allowSecrets GH_PAT, no inherit) = %q, %v; want no GH_PAT", env, err)
	}
}
