package sandbox

import (
	"slices"
	"strings"
	"testing"
)

func TestDecodeExitStatusCases(t *testing.T) {
	for _, tc := range []struct {
		status int
		code   int // -1: nil
		signal string
	}{
		{0, 0, ""},
		{1, 1, ""},
		{42, 42, ""},
		{128, 128, ""},
		{137, -1, "SIGKILL"},
		{143, -1, "SIGTERM"},
		{255, 255, ""},
	} {
		code, sig := DecodeExitStatus(tc.status)
		got := -1
		if code != nil {
			got = *code
		}
		if got != tc.code || sig != tc.signal {
			t.Errorf("DecodeExitStatus(%d) = %d, %q, want %d, %q", tc.status, got, sig, tc.code, tc.signal)
		}
	}
}

func TestInitScriptCases(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		want []string
		not  []string
	}{
		{"unset-missing", []string{"A=1"}, []string{"unset HOSTNAME;", "unset HOME;", "unset PATH;"}, []string{"A=1"}},
		{"restore-owned", []string{"PATH=/bin", "HOME=/tmp"}, []string{"PATH='/bin'; export PATH;", "HOME='/tmp'; export HOME;"}, nil},
		{"quote", []string{"PWD=/it's"}, []string{`PWD='/it'\''s'`}, nil},
		{"secret-not-in-argv", []string{"DSH_SESSION_ID=s1", "TOKENISH=x"}, nil, []string{"s1", "TOKENISH"}},
	} {
		got := initScript(tc.env)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("initScript(%q) = %q, want it to contain %q", tc.env, got, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(got, n) {
				t.Errorf("initScript(%q) = %q, want no %q", tc.env, got, n)
			}
		}
	}
	args := InitArgs("echo hi", nil)
	if !slices.Equal(args[:2], []string{"/bin/sh", "-c"}) || args[3] != "sh" || args[4] != "echo hi" {
		t.Errorf("InitArgs(%q, nil) = %q, want /bin/sh -c SCRIPT sh %q", "echo hi", args, "echo hi")
	}
}
