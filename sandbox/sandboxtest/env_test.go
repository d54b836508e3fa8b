package sandboxtest

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/childenv"
)

func TestExpectedEnvLayers(t *testing.T) {
	service := map[string]string{
		"LANG":           "C.UTF-8",
		"OPENAI_API_KEY": "sk-x",
		"LD_PRELOAD":     "/evil.so",
		"DSH_STALE":      "stale",
		"DSH_SESSION_ID": "stale-id",
		"UNLISTED":       "u",
	}
	getenv := func(k string) (string, bool) { v, ok := service[k]; return v, ok }
	req := &sandbox.Request{
		Env:    []string{"B=from-request", "TERM=xterm", "DSH_SESSION_ID=forged"},
		DSHEnv: []string{"DSH_HOME=/h", "DSH_SESSION_ID=real", "DSH_SHELL=1"},
		Policy: sandbox.Policy{
			EnvInherit: []string{"LANG", "OPENAI_API_KEY", "LD_PRELOAD", "DSH_STALE", "DSH_SESSION_ID", "MISSING"},
			EnvSet:     map[string]string{"B": "from-policy", "A": "policy", "PATH": "/policy/bin"},
		},
	}
	got, err := expectedEnv([]string{"PATH=/usr/bin", "HOME=/tmp", "DSH_FROM_IMAGE=x"}, req, getenv)
	if err != nil {
		t.Fatalf("expectedEnv() error = %v", err)
	}
	want := []string{
		"A=policy",
		"B=from-request", // Request.Env comes after the policy's env.set
		"DSH_HOME=/h",
		"DSH_SESSION_ID=real",
		"DSH_SHELL=1",
		"GIT_PAGER=cat",
		"HOME=/tmp",
		"LANG=C.UTF-8",
		"NO_COLOR=1",
		"PAGER=cat",
		"PATH=/policy/bin",
		"TERM=xterm",
	}
	if !slices.Equal(got, want) {
		t.Errorf("expectedEnv() = %q, want %q", got, want)
	}

	req.Env = []string{"BAD\x00=x"}
	if _, err := expectedEnv(nil, req, getenv); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("expectedEnv(NUL in a name) error = %v, want ErrInvalid", err)
	}
}

func TestParseEnv0Cases(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{in: "", want: map[string]string{}},
		{in: "A=1\x00B=\x00", want: map[string]string{"A": "1", "B": ""}},
		{in: "A=1\x00B=x=y", want: map[string]string{"A": "1", "B": "x=y"}},
		{in: "A=line\nbreak\x00", want: map[string]string{"A": "line\nbreak"}},
		{in: "A=1\x00A=2\x00", wantErr: true},
		{in: "NOEQUALS\x00", wantErr: true},
		{in: "=v\x00", wantErr: true},
	} {
		got, err := parseEnv0(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseEnv0(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && !mapsEqual(got, tc.want) {
			t.Errorf("parseEnv0(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestDiffEnvCases(t *testing.T) {
	want := map[string]string{"A": "1", "B": "2"}
	for _, tc := range []struct {
		name    string
		got     map[string]string
		extraOK []string
		want    []string
	}{
		{"equal", map[string]string{"A": "1", "B": "2"}, nil, nil},
		{"shell vars allowed", map[string]string{"A": "1", "B": "2", "PWD": "/"}, shellOwnedEnv, nil},
		{"shell vars not allowed", map[string]string{"A": "1", "B": "2", "PWD": "/"}, nil, []string{`unexpected PWD="/"`}},
		{"missing and changed", map[string]string{"A": "9"}, nil, []string{`A = "9", want "1"`, `missing B (want "2")`}},
	} {
		if got := diffEnv(tc.got, want, tc.extraOK); !slices.Equal(got, tc.want) {
			t.Errorf("diffEnv(%s) = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestPlantHostileEnv(t *testing.T) {
	names := plantHostileEnv(t)
	for _, v := range hostileEnv {
		if !slices.Contains(names, v.name) {
			t.Errorf("plantHostileEnv() names lack %s", v.name)
		}
	}
	if slices.Contains(names, "SANDBOXTEST_NOT_LISTED") {
		t.Errorf("plantHostileEnv() names include SANDBOXTEST_NOT_LISTED")
	}
	// Every planted name except the control must be filtered by
	// BuildEnv: otherwise the env cases would test nothing.
	got, err := childenv.Build(childenv.Input{Inherit: names, Getenv: func(k string) (string, bool) {
		for _, v := range hostileEnv {
			if v.name == k {
				return v.value, true
			}
		}
		return "", false
	}})
	if err != nil {
		t.Fatal(err)
	}
	var inherited []string
	for _, e := range got {
		if name, _, _ := strings.Cut(e, "="); !slices.Contains([]string{"NO_COLOR", "TERM", "PAGER", "GIT_PAGER"}, name) {
			inherited = append(inherited, e)
		}
	}
	if want := []string{"SANDBOXTEST_INHERITED=inherited-value"}; !slices.Equal(inherited, want) {
		t.Errorf("BuildEnv(hostile env) inherited %q, want %q", inherited, want)
	}
}
