package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

func TestFlagsFirst(t *testing.T) {
	app := newApp(nil, nil)
	for _, tc := range []struct{ in, want []string }{
		{[]string{"policy", "check", "f.yaml", "--session-id", "s1", "--json"}, []string{"policy", "check", "--session-id", "s1", "--json", "f.yaml"}},
		{[]string{"--home", "/h", "images", "rm", "busybox:1", "--backend=docker"}, []string{"--home", "/h", "images", "rm", "--backend=docker", "busybox:1"}},
		{[]string{"session", "show", "a.jsonl", "--json", "b"}, []string{"session", "show", "--json", "a.jsonl", "b"}},
		// A word that names no flag, and everything after --, stay put.
		{[]string{"session", "show", "a.jsonl", "--bogus"}, []string{"session", "show", "a.jsonl", "--bogus"}},
		{[]string{"policy", "check", "f.yaml", "--", "--json"}, []string{"policy", "check", "f.yaml", "--", "--json"}},
		// exec's words belong to the command it runs.
		{[]string{"exec", "ls", "--json"}, []string{"exec", "ls", "--json"}},
		{[]string{"exec", "--json", "--", "ls", "--json"}, []string{"exec", "--json", "--", "ls", "--json"}},
		{[]string{"nosuch", "x", "--json"}, []string{"nosuch", "x", "--json"}},
	} {
		got := flagsFirst(app, append([]string{"dsh-sandbox"}, tc.in...))
		if want := append([]string{"dsh-sandbox"}, tc.want...); !reflect.DeepEqual(got, want) {
			t.Errorf("flagsFirst(%q) = %q, want %q", tc.in, got[1:], tc.want)
		}
	}
}

// TestFlagsAfterArguments runs a command with its flags after its
// positional argument, as the flags-first order would.
func TestFlagsAfterArguments(t *testing.T) {
	out, errOut, code := run(t, "--home", t.TempDir(), "policy", "check", "workspace-write", "--session-id", "s1", "--json")
	var v struct {
		Policy struct {
			Name string `json:"name"`
		} `json:"policy"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &v) != nil || v.Policy.Name != "workspace-write" {
		t.Errorf("policy check NAME --session-id s1 --json: exit %d, stdout %q, stderr %q; want the JSON report", code, out, errOut)
	}
}

func TestUnknownCommandSuggests(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"exce"}, `Did you mean "exec"?`},
		{[]string{"images", "lst"}, `Did you mean "list"?`},
	} {
		_, errOut, code := run(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, "is not a command") || !strings.Contains(errOut, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %s", tc.args, code, errOut, tc.want)
		}
	}
	if out, _, code := run(t, "images"); code != 0 || !strings.Contains(out, "list") {
		t.Errorf("images without a subcommand: exit %d, stdout %q; want its help", code, out)
	}
}

// TestJSONCommandsPrintErrorsAsJSON: every command with --json prints a
// refusal as the error object on stdout, whether it comes from a flag
// check before the command runs or from the command itself.
func TestJSONCommandsPrintErrorsAsJSON(t *testing.T) {
	var leaves [][]string
	var walk func(path []string, cmds []*cli.Command)
	walk = func(path []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(append([]string{}, path...), c.Name)
			if len(c.Subcommands) > 0 {
				walk(p, c.Subcommands)
				continue
			}
			for _, f := range c.Flags {
				if f.Names()[0] == "json" {
					leaves = append(leaves, p)
				}
			}
		}
	}
	walk(nil, newApp(nil, nil).Commands)
	if len(leaves) < 10 {
		t.Fatalf("found %d commands with --json, want at least 10", len(leaves))
	}
	check := func(args []string, class string) {
		t.Helper()
		out, errOut, code := run(t, args...)
		var v struct {
			Error struct {
				Class   string `json:"class"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if code == 0 || json.Unmarshal([]byte(out), &v) != nil || v.Error.Class != class || v.Error.Message == "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want the error object of class %s", args, code, out, errOut, class)
		}
	}
	for _, p := range leaves {
		check(append(append([]string{}, p...), "--json", "--log-level", "loud"), "invalid")
	}
	check([]string{"--home", t.TempDir(), "policy", "check", "--json", "/nonexistent/p.yaml"}, "invalid")
	check([]string{"images", "rm", "--json", "--data-dir", t.TempDir(), "--backend", "oci", "nosuch:1"}, "not_found")
	t.Logf("%d commands with --json", len(leaves))
}
