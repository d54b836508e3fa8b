package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
)

// writeConfig writes a --config file (mode 0644) and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dsh-sandbox.yaml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// probe runs the CLI with args, replacing the action of the command at
// path (e.g. "hooks", "run") by see, which reads the flags as the command
// would. It returns the exit code and stderr.
func probe(t *testing.T, path []string, see func(c *cli.Context), args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	app := newApp(&stdout, &stderr)
	app.Reader = bytes.NewReader(nil)
	cmds := app.Commands
	var cmd *cli.Command
	for _, name := range path {
		for _, c := range cmds {
			if c.Name == name {
				cmd = c
			}
		}
		if cmd == nil || cmd.Name != name {
			t.Fatalf("no command %v", path)
		}
		cmds = cmd.Subcommands
	}
	ran := false
	cmd.Action = func(c *cli.Context) error { ran = true; see(c); return nil }
	err := app.Run(append([]string{"dsh-sandbox"}, args...))
	if err != nil {
		stderr.WriteString(err.Error())
	} else if !ran {
		t.Fatalf("%v: the action did not run", args)
	}
	return exitCode(err), stderr.String()
}

// TestConfigSectionsReachCommands: each section of the file reaches its
// command's flags, global keys reach every command, and a section may
// set a global flag for its command alone.
func TestConfigSectionsReachCommands(t *testing.T) {
	cfg := writeConfig(t, `
home: /cfg/home
log-format: console
exec:
  policy: read-only
  timeout: 30s
  cpus: 1
  mount: [/srv/data/a:/a:ro, /srv/data/b:/b]
  interactive: true
serve:
  listen: unix:///cfg/sandbox.sock
  max-concurrent: 8
  max-queue: 0
  job-ttl: 0
  audit-log: /cfg/audit.jsonl
  policy-dir: /cfg/policies
  log-format: json
hooks:
  run:
    policy: ci
    config: /cfg/hooks.json
`)
	t.Run("serve", func(t *testing.T) {
		code, errOut := probe(t, []string{"serve"}, func(c *cli.Context) {
			f := newFlags(c)
			got := []any{c.StringSlice("listen"), c.Int("max-concurrent"), c.Int("max-queue"), c.Duration("job-ttl"),
				c.String("audit-log"), c.String("policy-dir"), f.String("log-format"), f.String("home"), c.Duration("shutdown-grace")}
			want := []any{[]string{"unix:///cfg/sandbox.sock"}, 8, 0, time.Duration(0),
				"/cfg/audit.jsonl", "/cfg/policies", "json", "/cfg/home", 30 * time.Second}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("serve sees %v, want %v", got, want)
			}
			if !c.IsSet("max-queue") {
				t.Errorf("serve: max-queue 0 from the file is not set")
			}
		}, "--config", cfg, "serve")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
	})
	t.Run("exec", func(t *testing.T) {
		code, errOut := probe(t, []string{"exec"}, func(c *cli.Context) {
			got := []any{c.String("policy"), c.Duration("timeout"), c.Float64("cpus"), c.StringSlice("mount"), c.Bool("interactive"), newFlags(c).String("log-format")}
			want := []any{"read-only", 30 * time.Second, 1.0, []string{"/srv/data/a:/a:ro", "/srv/data/b:/b"}, true, "console"}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("exec sees %v, want %v", got, want)
			}
		}, "--config", cfg, "exec", "--", "true")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
	})
	t.Run("hooks run", func(t *testing.T) {
		code, errOut := probe(t, []string{"hooks", "run"}, func(c *cli.Context) {
			// hooks run's own --config is its hook file; the global one is
			// taken before the command name.
			if got := []string{c.String("policy"), c.String("config"), newFlags(c).String("config")}; !reflect.DeepEqual(got, []string{"ci", "/cfg/hooks.json", cfg}) {
				t.Errorf("hooks run sees policy, hook config, global config %q", got)
			}
		}, "--config", cfg, "hooks", "run", "--dialect", "codex", "--event", "Stop")
		if code != 0 {
			t.Fatalf("exit %d: %s", code, errOut)
		}
	})
}

// TestConfigReachesTheRealCommands: without a probe, the values take
// effect where the commands use them.
func TestConfigReachesTheRealCommands(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "absent.yaml")
	cfg := writeConfig(t, "exec: {policy: "+missing+"}\nserve: {listen: [tcp://127.0.0.1:0]}\n")
	_, errOut, code := run(t, "--config", cfg, "exec", "--cwd", t.TempDir(), "--", "true")
	if code != 2 || !strings.Contains(errOut, "--policy") || !strings.Contains(errOut, missing) {
		t.Errorf("exec with exec.policy %s: exit %d, stderr %q; want 2 naming --policy and the file", missing, code, errOut)
	}
	home := t.TempDir()
	_, errOut, code = run(t, "--config", cfg, "serve", "--home", home, "--state-dir", filepath.Join(home, "state"), "--data-dir", filepath.Join(home, "data"))
	if code != 2 || !strings.Contains(errOut, "tcp://127.0.0.1:0: a TCP listener needs --token-file") {
		t.Errorf("serve with serve.listen tcp: exit %d, stderr %q; want 2 refusing the TCP listener without tokens", code, errOut)
	}
}

// TestConfigPrecedenceCase: the command line, before or after the
// command name, beats the environment, which beats the file (its
// command section before its top level), which beats the default.
func TestConfigPrecedenceCase(t *testing.T) {
	home := t.TempDir()
	top := writeConfig(t, "sessions-root: /top\n")
	section := writeConfig(t, "sessions-root: /top\nlocate: {sessions-root: /section}\n")
	tests := []struct {
		name, cfg, env string
		args           []string
		want           string
	}{
		{"default", "", "", nil, filepath.Join(home, "sessions")},
		{"top level", top, "", nil, "/top"},
		{"section over top level", section, "", nil, "/section"},
		{"environment over file", section, "/env", nil, "/env"},
		{"flag after the command over all", section, "/env", []string{"--sessions-root", "/flag"}, "/flag"},
		{"flag before the command over all", section, "/env", []string{"before", "/early"}, "/early"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"--home", home}
			if tc.cfg != "" {
				args = append(args, "--config", tc.cfg)
			}
			if tc.env != "" {
				t.Setenv("DSH_SANDBOX_SESSIONS_ROOT", tc.env)
			}
			if len(tc.args) == 2 && tc.args[0] == "before" {
				args = append(args, "--sessions-root", tc.args[1], "locate")
			} else {
				args = append(append(args, "locate"), tc.args...)
			}
			args = append(args, "--cwd", "/p", "--session-id", "a", "--compression", "none")
			out, errOut, code := run(t, args...)
			want := `{"kind":"jsonl","path":"` + tc.want + `/--p--/a/session.jsonl"}`
			if code != 0 || strings.TrimSpace(out) != want {
				t.Errorf("%v = %q (exit %d, %s); want %s", args, out, code, errOut, want)
			}
		})
	}
	// A command's own flag: the command line beats the file.
	cfg := writeConfig(t, "exec: {policy: read-only}\n")
	code, errOut := probe(t, []string{"exec"}, func(c *cli.Context) {
		if got := c.String("policy"); got != "ci" {
			t.Errorf("exec --policy ci with exec.policy read-only in the file = %q, want ci", got)
		}
	}, "--config", cfg, "exec", "--policy", "ci", "--", "true")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
}

// TestConfigRefusedCase: an unknown key or a wrong type anywhere in the
// file is a usage error naming the file and the key, even for a command
// the run does not use; values are not quoted.
func TestConfigRefusedCase(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"unknown top-level key", "polcy: read-only\n", `unknown key "polcy"`},
		{"command flag at the top level", "timeout: 30s\n", `unknown key "timeout"`},
		{"the policy command is a section", "policy: read-only\n", "policy is a string; want a mapping: the section of command `policy` (a command's flags go in its section, e.g. exec: {policy: read-only})"},
		{"unknown flag in a section", "exec: {polcy: read-only}\n", `unknown key "exec.polcy"`},
		{"unknown command", "exce: {policy: ci}\n", `unknown key "exce"`},
		{"unknown subcommand", "hooks: {rnu: {policy: ci}}\n", `unknown key "hooks.rnu" (want a subcommand: run)`},
		{"flag of a command group", "hooks: {policy: ci}\n", `unknown key "hooks.policy"`},
		{"config in the file", "config: /other.yaml\n", `unknown key "config"`},
		{"config in a section", "serve: {config: /other.yaml}\n", `unknown key "serve.config"`},
		{"section not a mapping", "serve: unix:///x\n", "serve is a string; want a mapping"},
		{"integer for a string", "exec: {policy: 5}\n", "exec.policy is an integer; want a string"},
		{"string for an integer", "serve: {max-concurrent: eight}\n", "serve.max-concurrent is a string; want an integer"},
		{"number for an integer", "serve: {max-concurrent: 1.5}\n", "serve.max-concurrent is a number; want an integer"},
		{"string for a bool", "exec: {interactive: yes}\n", "exec.interactive is a string; want true or false"},
		{"integer for a duration", "exec: {timeout: 30}\n", "exec.timeout is an integer; want a duration"},
		{"bad duration", "serve: {job-ttl: soon}\n", "serve.job-ttl is a string; want a duration"},
		{"mapping in a list", "serve: {listen: [{a: b}]}\n", "serve.listen is a list; want a string or a list of strings"},
		{"null value", "home:\n", "home is empty (null); want a string"},
		{"not a mapping", "- home\n", "not valid YAML or JSON"},
		{"duplicate key", "home: /a\nhome: /b\n", "already defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := writeConfig(t, tc.text)
			_, errOut, code := run(t, "--config", cfg, "locate", "--no-cwd", "--session-id", "a")
			if code != 2 || !strings.Contains(errOut, "--config: "+cfg) || !strings.Contains(errOut, tc.want) {
				t.Errorf("--config with %q: exit %d, stderr %q; want 2 naming %s and %q", tc.text, code, errOut, cfg, tc.want)
			}
		})
	}
	// It names every problem at once.
	cfg := writeConfig(t, "bogus: 1\nexec: {timeout: 5}\n")
	if _, errOut, _ := run(t, "--config", cfg, "locate", "--no-cwd"); !strings.Contains(errOut, `"bogus"`) || !strings.Contains(errOut, "exec.timeout") {
		t.Errorf("stderr %q does not name both bad keys", errOut)
	}
}

// TestConfigMustBeOperatorOwned: a file others may write could name
// policies and listeners: refused.
func TestConfigMustBeOperatorOwned(t *testing.T) {
	cfg := writeConfig(t, "home: /h\n")
	if err := os.Chmod(cfg, 0o666); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run(t, "--config", cfg, "locate", "--no-cwd", "--session-id", "a")
	if code != 2 || !strings.Contains(errOut, "--config") || !strings.Contains(errOut, "writable") {
		t.Errorf("group/other-writable --config: exit %d, stderr %q; want 2 saying it is writable by others", code, errOut)
	}
}

// TestConfigExampleLoads: the committed example is a valid file for this
// build, and a command runs with it.
func TestConfigExampleLoads(t *testing.T) {
	const example = "../../contrib/dsh-sandbox.yaml"
	data, err := os.ReadFile(example)
	if err != nil {
		t.Fatal(err)
	}
	tree, err := parseConfig(example, data, newApp(nil, nil))
	if err != nil {
		t.Fatalf("parseConfig(%s): %v", example, err)
	}
	for _, k := range []string{"exec", "serve", "hooks"} {
		if _, ok := tree[k].(map[string]any); !ok {
			t.Errorf("the example has no %s section", k)
		}
	}
	code, errOut := probe(t, []string{"serve"}, func(c *cli.Context) {
		if c.Int("max-concurrent") != 8 || c.String("audit-log") != "/var/lib/dsh-sandbox/audit.jsonl" || newFlags(c).String("log-level") != "info" {
			t.Errorf("serve with the example: max-concurrent %d, audit-log %q, log-level %q", c.Int("max-concurrent"), c.String("audit-log"), newFlags(c).String("log-level"))
		}
	}, "--config", example, "serve")
	if code != 0 {
		t.Fatalf("serve with the example: exit %d: %s", code, errOut)
	}
}

// TestConfigOutsideWorkspaceCase: a --config file inside the workspace
// (--cwd, or the current directory) or a --workspace-roots directory is
// one a sandboxed call could have written: refused, whatever the file
// itself says of them.
func TestConfigOutsideWorkspaceCase(t *testing.T) {
	ws := t.TempDir()
	elsewhere := t.TempDir()
	cfg := filepath.Join(ws, "sub", "dsh-sandbox.yaml")
	if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte("no-cwd: true\nworkspace-roots: /nonexistent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(elsewhere, "ws-link")
	if err := os.Symlink(ws, link); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string // "" means the file is read
	}{
		{"in --cwd", []string{"--cwd", ws}, "the workspace"},
		{"in --cwd reached through a link", []string{"--cwd", link}, "the workspace"},
		{"in a workspace root", []string{"--no-cwd", "--workspace-roots", "/nonexistent-root:" + ws}, "workspace root"},
		{"another workspace", []string{"--cwd", elsewhere}, ""},
		{"no workspace", []string{"--no-cwd"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(append([]string{"--config", cfg}, tc.args...), "locate", "--session-id", "a")
			_, errOut, code := run(t, args...)
			refused := code == 2 && strings.Contains(errOut, "--config") && strings.Contains(errOut, tc.want)
			switch {
			case tc.want != "" && !refused:
				t.Errorf("%q: exit %d, stderr %q; want 2 naming --config and %q", args, code, errOut, tc.want)
			case tc.want == "" && strings.Contains(errOut, "--config"):
				t.Errorf("%q: exit %d, stderr %q; want the file read", args, code, errOut)
			}
		})
	}
	t.Run("in the current directory", func(t *testing.T) {
		t.Chdir(ws)
		_, errOut, code := run(t, "--config", cfg, "locate", "--session-id", "a")
		if code != 2 || !strings.Contains(errOut, "the workspace") {
			t.Errorf("config in the current directory: exit %d, stderr %q; want 2 naming the workspace", code, errOut)
		}
		// A command that runs no call there (doctor, serve, …) does
		// not take the current directory for a workspace; a workspace
		// root still counts.
		if _, errOut, _ := run(t, "--config", cfg, "doctor"); strings.Contains(errOut, "--config") {
			t.Errorf("doctor with its config in the current directory: stderr %q; want the file read", errOut)
		}
		_, errOut, code = run(t, "--config", cfg, "--workspace-roots", ws, "doctor")
		if code != 2 || !strings.Contains(errOut, "workspace root") {
			t.Errorf("doctor with its config in a workspace root: exit %d, stderr %q; want 2 naming the workspace root", code, errOut)
		}
	})
}

// TestChoiceFlagsRefuseUnknownValues: a value outside a flag's set is a
// usage error naming the flag, from the command line, the environment or
// the config file; every listed value is accepted.
func TestChoiceFlagsRefuseUnknownValues(t *testing.T) {
	home := t.TempDir()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("log-format: xml\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  string
		args []string
		flag string
	}{
		{"", []string{"--log-level", "loud", "env", "show"}, "--log-level"},
		{"", []string{"env", "show", "--log-format", "xml"}, "--log-format"},
		{"DSH_SANDBOX_LOG_LEVEL=loud", []string{"env", "show"}, "--log-level"},
		{"", []string{"--config", cfg, "env", "show"}, "--log-format"},
		{"", []string{"env", "show", "--compression", "gzip"}, "--compression"},
		{"", []string{"locate", "--persistence", "postgres", "--session-id", "s"}, "--persistence"},
		{"", []string{"hooks", "run", "--dialect", "cursor", "--config", cfg, "--event", "Stop"}, "--dialect"},
	} {
		if k, v, ok := strings.Cut(tc.env, "="); ok {
			t.Setenv(k, v)
		}
		_, errOut, code := run(t, append([]string{"--home", home}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.flag+": ") || !strings.Contains(errOut, "is not one of") {
			t.Errorf("%s %q: exit %d, stderr %q; want 2 naming %s", tc.env, tc.args, code, errOut, tc.flag)
		}
		if k, _, ok := strings.Cut(tc.env, "="); ok {
			os.Unsetenv(k)
		}
	}
	for _, cf := range choiceFlags {
		if cf.name == "dialect" || cf.name == "source" {
			continue // hooks run flags; TestHooks* run them with each value
		}
		for _, v := range cf.values {
			if _, errOut, code := run(t, "--home", home, "--"+cf.name, v, "env", "show"); code != 0 {
				t.Errorf("--%s %s: exit %d, stderr %q; want 0", cf.name, v, code, errOut)
			}
		}
	}
}
