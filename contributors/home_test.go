package contributors

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveHomeCase(t *testing.T) {
	cwd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	const user = "/users/tester"
	cases := []struct {
		name     string
		explicit string
		env      map[string]string
		want     string
		wantErr  string // substring; empty means success
	}{
		{"explicit wins", "/opt/dsh", map[string]string{"DSH_HOME": "/env/dsh"}, "/opt/dsh", ""},
		{"explicit cleaned", "/opt//dsh/./x/..", nil, "/opt/dsh", ""},
		{"explicit tilde", "~/custom", map[string]string{"DSH_HOME": "/env/dsh"}, user + "/custom", ""},
		{"explicit bare tilde", "~", nil, user, ""},
		{"explicit relative", "rel/home", nil, filepath.Join(cwd, "rel/home"), ""},
		{"blank explicit uses env", "  ", map[string]string{"DSH_HOME": "/env/dsh"}, "/env/dsh", ""},
		{"env tilde", "", map[string]string{"DSH_HOME": "~/envhome"}, user + "/envhome", ""},
		{"env relative", "", map[string]string{"DSH_HOME": "envrel"}, filepath.Join(cwd, "envrel"), ""},
		{"env unset uses default", "", nil, user + "/.dsh", ""},
		{"blank env uses default", "", map[string]string{"DSH_HOME": ""}, user + "/.dsh", ""},
		{"space env uses default", "", map[string]string{"DSH_HOME": " \t\n"}, user + "/.dsh", ""},
		{"tilde user refused", "~bob/dsh", nil, "", `explicit home "~bob/dsh"`},
		{"env tilde user refused", "", map[string]string{"DSH_HOME": "~bob"}, "", `$DSH_HOME "~bob"`},
		{"NUL refused", "/opt/d\x00sh", nil, "", "NUL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			getenv := func(k string) string { return c.env[k] }
			userHome := func() (string, error) { return user, nil }
			got, err := ResolveHome(c.explicit, getenv, userHome)
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("ResolveHome(%q) = %q, %v, want error containing %q", c.explicit, got, err, c.wantErr)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("ResolveHome(%q) = %q, %v, want %q", c.explicit, got, err, c.want)
			}
		})
	}
}

func TestResolveHomeUserHomeOnlyWhenNeeded(t *testing.T) {
	getenv := func(string) string { return "/env/dsh" }
	userHome := func() (string, error) {
		t.Error("ResolveHome called userHome without a ~ to expand")
		return "", errors.New("unexpected")
	}
	if got, err := ResolveHome("", getenv, userHome); err != nil || got != "/env/dsh" {
		t.Errorf("ResolveHome(\"\") = %q, %v, want /env/dsh", got, err)
	}
}

func TestResolveHomeUserHomeFailureCase(t *testing.T) {
	getenv := func(string) string { return "" }
	cases := []struct {
		name     string
		userHome func() (string, error)
	}{
		{"error", func() (string, error) { return "", errors.New("$HOME is not defined") }},
		{"empty", func() (string, error) { return "", nil }},
	}
	for _, c := range cases {
		got, err := ResolveHome("", getenv, c.userHome)
		if err == nil || !strings.Contains(err.Error(), `default home "~/.dsh"`) {
			t.Errorf("ResolveHome(\"\") with userHome %s = %q, %v, want an error naming the default home", c.name, got, err)
		}
	}
}

func TestResolveHomeNilDefaults(t *testing.T) {
	t.Setenv("DSH_HOME", "/from/process/env")
	if got, err := ResolveHome("", nil, nil); err != nil || got != "/from/process/env" {
		t.Errorf("ResolveHome(\"\", nil, nil) = %q, %v, want /from/process/env", got, err)
	}
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("DSH_HOME", "")
	if got, err := ResolveHome("", nil, nil); err != nil || got != filepath.Join(home, ".dsh") {
		t.Errorf("ResolveHome(\"\", nil, nil) = %q, %v, want %q", got, err, filepath.Join(home, ".dsh"))
	}
}

func TestCheckHomesCase(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home) // os.UserHomeDir reads $HOME on Unix
	cases := []struct {
		name     string
		top      string
		nested   string
		conflict bool
	}{
		{"both unset", "", "", false},
		{"only top", "/a/dsh", "", false},
		{"only nested", "", "/b/dsh", false},
		{"blank nested", "/a/dsh", "   ", false},
		{"same", "/a/dsh", "/a/dsh", false},
		{"same after cleaning", "/a/dsh/", "/a/./x/../dsh", false},
		{"same after tilde", "~/.dsh", filepath.Join(home, ".dsh"), false},
		{"different", "/a/dsh", "/b/dsh", true},
		{"tilde differs", "~/.dsh", "~/.dsh-skills", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckHomes(c.top, c.nested)
			if !c.conflict {
				if err != nil {
					t.Errorf("CheckHomes(%q, %q) = %v, want nil", c.top, c.nested, err)
				}
				return
			}
			var ce *HomeConflictError
			if !errors.As(err, &ce) {
				t.Fatalf("CheckHomes(%q, %q) = %v, want *HomeConflictError", c.top, c.nested, err)
			}
			if ce.Top != c.top || ce.Nested != c.nested {
				t.Errorf("CheckHomes(%q, %q) error = %+v, want it to carry both values", c.top, c.nested, ce)
			}
			if msg := err.Error(); !strings.Contains(msg, c.top) || !strings.Contains(msg, c.nested) {
				t.Errorf("CheckHomes(%q, %q) message %q does not name both homes", c.top, c.nested, msg)
			}
		})
	}
}

func TestCheckHomesBadValue(t *testing.T) {
	err := CheckHomes("/a/dsh", "~bob/dsh")
	if err == nil || !strings.Contains(err.Error(), `nested skills home "~bob/dsh"`) {
		t.Errorf("CheckHomes(/a/dsh, ~bob/dsh) = %v, want an error naming the nested home", err)
	}
}
