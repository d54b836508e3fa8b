package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestParseEnvFile(t *testing.T) {
	tests := []struct {
		name, data string
		want       []string
		warned     string
		errLine    string // a refusal naming this "file:line"
	}{
		{name: "lines, comments and blanks", data: "# c\nA=1\n\n  # indented comment\nB=x=y\r\nC=\n", want: []string{"A=1", "B=x=y", "C="}},
		{name: "value kept as written", data: "Q= spaced 'quoted' \n", want: []string{"Q= spaced 'quoted' "}},
		{name: "DSH_* dropped", data: "A=1\nDSH_SESSION_ID=forged\ndsh_home=/\n", want: []string{"A=1"}, warned: "DSH_SESSION_ID"},
		{name: "no equals", data: "A=1\nJUSTNAME\n", errLine: "f.env:2"},
		{name: "bad name", data: "A B=1\n", errLine: "f.env:1"},
		{name: "leading digit", data: "1A=1\n", errLine: "f.env:1"},
		{name: "NUL", data: "A=1\nB=x\x00y\n", errLine: "f.env:2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var warnings []string
			got, err := parseEnvFile("f.env", []byte(tc.data), func(f string, a ...any) {
				warnings = append(warnings, f)
				for _, v := range a {
					if s, ok := v.(string); ok {
						warnings = append(warnings, s)
					}
				}
			})
			if tc.errLine != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errLine) || !errors.Is(err, sandbox.ErrInvalid) {
					t.Fatalf("parseEnvFile = %v, %v; want a usage error naming %s", got, err, tc.errLine)
				}
				if strings.Contains(err.Error(), "x\x00y") {
					t.Errorf("the error %q shows the value", err)
				}
				return
			}
			if err != nil || strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("parseEnvFile = %q, %v; want %q", got, err, tc.want)
			}
			if tc.warned != "" && !strings.Contains(strings.Join(warnings, " "), tc.warned) {
				t.Errorf("warnings %q do not name %s", warnings, tc.warned)
			}
		})
	}
}

func TestParseMount(t *testing.T) {
	for spec, want := range map[string]sandbox.Mount{
		"/a:/b":    {Source: "/a", Target: "/b"},
		"/a:/b:ro": {Source: "/a", Target: "/b", ReadOnly: true},
		"/a:/b:rw": {Source: "/a", Target: "/b"},
	} {
		if got, err := parseMount(spec); err != nil || got != want {
			t.Errorf("parseMount(%q) = %+v, %v; want %+v", spec, got, err, want)
		}
	}
	for _, bad := range []string{"/a", "/a:/b:rx", "a:/b", "/a:b", "/a:/b:ro:x", ""} {
		if _, err := parseMount(bad); err == nil {
			t.Errorf("parseMount(%q) accepted", bad)
		}
	}
}

// TestNarrowFlagNames: every field policy.Narrow can refuse maps to the
// flag that sets it.
func TestNarrowFlagNames(t *testing.T) {
	for _, f := range []string{"memoryBytes", "cpus", "pids", "timeoutMs", "network", "mounts"} {
		if !strings.HasPrefix(narrowFlagNames[f], "--") {
			t.Errorf("no flag for Narrowing field %s", f)
		}
	}
}
