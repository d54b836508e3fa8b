package contributors

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestResolveHomeCase(t *testing.T) {
	cwd := t.TempDir()
	t.Chdir(cwd)
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
		// dsh uses any explicit value that is not absent, blank included.
		{"blank explicit is a path", "  ", map[string]string{"DSH_HOME": "/env/dsh"}, filepath.Join(cwd, "  "), ""},
		{"explicit backslash tilde", `~\custom`, nil, user + "/custom", ""},
		{"env tilde", "", map[string]string{"DSH_HOME": "~/envhome"}, user + "/envhome", ""},
		{"env relative", "", map[string]string{"DSH_HOME": "envrel"}, filepath.Join(cwd, "envrel"), ""},
		{"env unset uses default", "", nil, user + "/.dsh", ""},
		{"blank env uses default", "", map[string]string{"DSH_HOME": ""}, user + "/.dsh", ""},
		{"space env uses default", "", map[string]string{"DSH_HOME": " \t\n"}, user + "/.dsh", ""},
		// JavaScript's trim: U+FEFF is blank, U+0085 is not.
		{"BOM env uses default", "", map[string]string{"DSH_HOME": "\uFEFF "}, user + "/.dsh", ""},
		{"NEL env is a path", "", map[string]string{"DSH_HOME": "\u0085"}, filepath.Join(cwd, "\u0085"), ""},
		// dsh expands only "~", "~/" and "~\"; "~bob" is a relative path.
		{"tilde user is a relative path", "~bob/dsh", nil, filepath.Join(cwd, "~bob/dsh"), ""},
		{"env tilde user is a relative path", "", map[string]string{"DSH_HOME": "~bob"}, filepath.Join(cwd, "~bob"), ""},
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
	userHome := func() (string, error) { return "", errors.New("no passwd entry") }
	got, err := ResolveHome("", getenv, userHome)
	if err == nil || !strings.Contains(err.Error(), `default home "~/.dsh"`) {
		t.Errorf("ResolveHome(\"\") with a failing userHome = %q, %v, want an error naming the default home", got, err)
	}
	// An empty home directory ($HOME set to "") is what Node's homedir
	// returns then: dsh's home becomes <cwd>/.dsh, and so does ours.
	cwd := t.TempDir()
	t.Chdir(cwd)
	if got, err := ResolveHome("", getenv, func() (string, error) { return "", nil }); err != nil || got != filepath.Join(cwd, ".dsh") {
		t.Errorf("ResolveHome(\"\") with an empty home = %q, %v, want %q", got, err, filepath.Join(cwd, ".dsh"))
	}
}

// TestUserHomeCase: $HOME when set, even to "", else the passwd entry.
func TestUserHomeCase(t *testing.T) {
	t.Setenv("HOME", "/some/home")
	if got, err := UserHome(); err != nil || got != "/some/home" {
		t.Errorf("UserHome() with HOME set = %q, %v", got, err)
	}
	t.Setenv("HOME", "")
	if got, err := UserHome(); err != nil || got != "" {
		t.Errorf("UserHome() with HOME empty = %q, %v, want \"\"", got, err)
	}
	os.Unsetenv("HOME")
	got, err := UserHome()
	if err != nil || !filepath.IsAbs(got) {
		t.Errorf("UserHome() with HOME unset = %q, %v, want the passwd entry's absolute home", got, err)
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
