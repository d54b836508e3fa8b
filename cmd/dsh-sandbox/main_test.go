package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// run runs the CLI in-process and returns stdout, stderr and the exit code
// main would use.
func run(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	app := newApp(&stdout, &stderr)
	app.Reader = bytes.NewReader(nil) // never the test process's stdin (exec reads a piped one)
	err := app.Run(flagsFirst(app, append([]string{"dsh-sandbox"}, args...)))
	if err != nil && !errors.As(err, new(*childExit)) {
		stderr.WriteString(err.Error())
	}
	return stdout.String(), stderr.String(), exitCode(err)
}

// assertEmptyDir fails when dir holds anything.
func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("%s holds %d entries (first %q), want none", dir, len(entries), entries[0].Name())
	}
}

func TestLocateCase(t *testing.T) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "r")
	tests := []struct {
		name string
		args []string
		want string
	}{
		// zstd is dsh's default compression, and so ours.
		{"jsonl", []string{"locate", "--sessions-root", "/r", "--cwd", "/srv/proj", "--session-id", "abc"},
			`{"kind":"jsonl","path":"/r/--srv-proj--/abc/session.jsonl.zstd"}`},
		{"none", []string{"locate", "--sessions-root", "/r", "--cwd", "/srv/proj", "--session-id", "abc", "--compression", "none"},
			`{"kind":"jsonl","path":"/r/--srv-proj--/abc/session.jsonl"}`},
		{"no-cwd", []string{"locate", "--sessions-root", "/r", "--no-cwd", "--session-id", "abc"},
			`{"kind":"jsonl","path":"/r/_no-cwd/abc/session.jsonl.zstd"}`},
		// The header keeps --cwd as written; dsh encodes the trailing "/".
		{"cwd as written", []string{"locate", "--sessions-root", "/r", "--cwd", "/srv/proj/", "--session-id", "abc"},
			`{"kind":"jsonl","path":"/r/--srv-proj---/abc/session.jsonl.zstd"}`},
		{"sqlite", []string{"locate", "--sessions-root", "/r", "--cwd", "/srv/proj", "--session-id", "abc", "--persistence", "sqlite",
			"--sqlite-path", filepath.Join(tmp, "s.sqlite")}, `null`},
		{"escaped id", []string{"locate", "--sessions-root", root, "--cwd", "/srv/proj", "--session-id", "a/b"},
			`{"kind":"jsonl","path":"` + root + `/--srv-proj--/a~002Fb/session.jsonl.zstd"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HOME", tmp)
			out, errOut, code := run(t, tt.args...)
			if code != 0 || strings.TrimSpace(out) != tt.want {
				t.Errorf("locate %v = %q (exit %d, stderr %q), want %q", tt.args, out, code, errOut, tt.want)
			}
		})
	}
	// None of these creates a file or directory.
	assertEmptyDir(t, tmp)
	if _, err := os.Stat("/r"); err == nil {
		t.Errorf("/r exists after locate; it must create nothing")
	}
}

// TestLocateRefusesInvalidUTF8ID: a session id that is not UTF-8 has no
// JavaScript (UTF-16) form and names no file: a usage error, while a
// valid non-ASCII id is located.
func TestLocateRefusesInvalidUTF8ID(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	out, errOut, code := run(t, "locate", "--sessions-root", "/r", "--cwd", "/srv/proj", "--session-id", "a\xffb")
	if code != 2 || out != "" || !strings.Contains(errOut, "--session-id") {
		t.Errorf("locate with a non-UTF-8 id = %q (exit %d, stderr %q), want exit 2 naming --session-id", out, code, errOut)
	}
	out, _, code = run(t, "locate", "--sessions-root", "/r", "--cwd", "/srv/proj", "--session-id", "会话")
	if want := `{"kind":"jsonl","path":"/r/--srv-proj--/~4F1A~8BDD/session.jsonl.zstd"}`; code != 0 || strings.TrimSpace(out) != want {
		t.Errorf("locate with id 会话 = %q (exit %d), want %s", out, code, want)
	}
}

func TestLocateNeedsSession(t *testing.T) {
	_, _, code := run(t, "locate", "--sessions-root", "/r")
	if code != 2 {
		t.Errorf("locate without --session-id exited %d, want 2", code)
	}
}

func TestEnvShowCase(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("HOME", tmp)
	t.Setenv("DSH_HOME", "")
	base := []string{"env", "show", "--home", "/h", "--sessions-root", "/r", "--cwd", "/srv/proj"}
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"agent", append(base, "--session-id", "abc"),
			[]string{"DSH_HOME=/h", "DSH_SESSION_ID=abc", "DSH_SESSION_JSONL=/r/--srv-proj--/abc/session.jsonl.zstd", "DSH_SHELL=1"}},
		{"no agent", base, []string{"DSH_HOME=/h", "DSH_SHELL=1"}},
		{"sqlite", append(base, "--session-id", "abc", "--persistence", "sqlite", "--sqlite-path", filepath.Join(tmp, "x.sqlite")),
			[]string{"DSH_HOME=/h", "DSH_SESSION_ID=abc", "DSH_SHELL=1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := run(t, tt.args...)
			got := strings.Split(strings.TrimSpace(out), "\n")
			if code != 0 || strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("env show %v = %q (exit %d, stderr %q), want %q", tt.args, got, code, errOut, tt.want)
			}
		})
	}
	assertEmptyDir(t, tmp)
}

func TestEnvShowHomePrecedenceCase(t *testing.T) {
	userHome := t.TempDir()
	tests := []struct {
		name     string
		explicit string
		dshHome  string
		want     string
	}{
		{"explicit wins", "/explicit", "/from-env", "/explicit"},
		{"DSH_HOME", "", "/from-env", "/from-env"},
		{"blank DSH_HOME counts as unset", "", "   ", filepath.Join(userHome, ".dsh")},
		{"default ~/.dsh", "", "", filepath.Join(userHome, ".dsh")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("HOME", userHome)
			t.Setenv("DSH_HOME", tt.dshHome)
			args := []string{"env", "show"}
			if tt.explicit != "" {
				args = append(args, "--home", tt.explicit)
			}
			out, errOut, code := run(t, args...)
			want := "DSH_HOME=" + tt.want + "\nDSH_SHELL=1"
			if code != 0 || strings.TrimSpace(out) != want {
				t.Errorf("env show (home %q, DSH_HOME %q) = %q (exit %d, %s), want %q", tt.explicit, tt.dshHome, out, code, errOut, want)
			}
		})
	}
	assertEmptyDir(t, userHome)
}

func TestEnvListJSON(t *testing.T) {
	out, errOut, code := run(t, "env", "list", "--json", "--home", "/h")
	if code != 0 {
		t.Fatalf("env list exited %d: %s", code, errOut)
	}
	for _, key := range []string{"DSH_HOME", "DSH_SHELL", "DSH_SESSION_ID", "DSH_SESSION_JSONL"} {
		if !strings.Contains(out, `"`+key+`"`) {
			t.Errorf("env list --json lacks %s: %s", key, out)
		}
	}
}

func TestBadFlagsExit2Case(t *testing.T) {
	tests := [][]string{
		{"locate", "--session-id", "abc", "--persistence", "postgres"},
		{"locate", "--session-id", "abc", "--compression", "gzip"},
		{"locate", "--session-id", "abc", "--no-cwd", "--cwd", "/x"},
		{"locate", "--session-id", ""},
		{"session", "show"},
		{"env", "show", "--no-such-flag"},
		{"images", "import", "busybox.tar"},
		{"images", "import", "--name", "a:1", "--backend", "podman", "busybox.tar"},
		{"images", "import", "--name", "a:1"},
		{"reap", "--backend", "podman"},
	}
	for _, args := range tests {
		_, _, code := run(t, args...)
		if code != 2 {
			t.Errorf("dsh-sandbox %q exited %d, want 2", args, code)
		}
	}
}

func TestExecRefusesBadInputCase(t *testing.T) {
	tmp := t.TempDir()
	base := []string{"exec", "--home", tmp, "--state-dir", filepath.Join(tmp, "state"), "--data-dir", filepath.Join(tmp, "data"), "--cwd", tmp}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"NUL in env value", []string{"--env", "A=b\x00c"}, "NUL"},
		{"DSH_ env", []string{"--env", "DSH_X=1"}, "DSH_X"},
		{"lower-case dsh_ env", []string{"--env", "dsh_x=1"}, "dsh_x"},
		{"env without =", []string{"--env", "A"}, "NAME=VALUE"},
		{"negative timeout", []string{"--timeout", "-1s"}, "--timeout"},
		{"unknown policy", []string{"--policy", "no-such-policy"}, "no-such-policy"},
		{"local through --backend", []string{"--backend", "local"}, "local"},
		{"no command", nil, "command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append(append([]string{}, base...), tt.args...), "--")
			if tt.args != nil {
				args = append(args, "touch "+filepath.Join(tmp, "ran"))
			}
			_, errOut, code := run(t, args...)
			if code != 2 || !strings.Contains(errOut, tt.want) {
				t.Errorf("exec %q: exit %d, stderr %q; want exit 2 naming %q", tt.args, code, errOut, tt.want)
			}
			if _, err := os.Stat(filepath.Join(tmp, "ran")); err == nil {
				t.Fatalf("exec %q ran the command", tt.args)
			}
		})
	}
}

func TestConflictingHomes(t *testing.T) {
	_, errOut, code := run(t, "env", "show", "--home", "/h", "--skills-home", "/other")
	if code != 2 || !strings.Contains(errOut, "/h") || !strings.Contains(errOut, "/other") {
		t.Errorf("env show with two homes: exit %d, stderr %q; want exit 2 naming both", code, errOut)
	}
	out, errOut, code := run(t, "env", "show", "--home", "/h", "--skills-home", "/h/")
	if code != 0 || !strings.Contains(out, "DSH_HOME=/h\n") {
		t.Errorf("env show with agreeing homes: exit %d, %q, %q", code, out, errOut)
	}
}

func TestProgressLineCases(t *testing.T) {
	for _, tc := range []struct {
		phase       string
		done, total int64
		want        string
	}{
		{"loading", 0, 100, "\rloading: [                              ]   0%"},
		{"loading", 50, 100, "\rloading: [###############               ]  50%"},
		{"loading", 150, 100, "\rloading: [##############################] 100%"},
		{"unpacking", 42, 0, "\runpacking: 42 bytes"},
	} {
		if got := progressLine(tc.phase, tc.done, tc.total); got != tc.want {
			t.Errorf("progressLine(%q, %d, %d) = %q, want %q", tc.phase, tc.done, tc.total, got, tc.want)
		}
	}
}
