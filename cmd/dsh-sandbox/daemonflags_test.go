package main

import (
	"errors"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// daemonCommands are the commands that open the docker or containerd
// backend or their images, and so take the daemon flags.
var daemonCommands = []string{"bench", "doctor", "exec", "hooks run", "images build", "images import", "images list", "images pull", "images rm", "mcp", "reap", "serve"}

// TestDaemonFlagsAreCommandFlags: the daemon addresses are flags of the
// commands that open the daemons, and of no other command or the root.
func TestDaemonFlagsAreCommandFlags(t *testing.T) {
	app := newApp(nil, nil)
	for _, f := range daemonFlags() {
		name := f.Names()[0]
		if takesFlag(&cli.Command{Flags: app.Flags}, name) {
			t.Errorf("--%s is a global flag", name)
		}
		takers := commandsTaking(app.Commands, name)
		slices.Sort(takers)
		if !reflect.DeepEqual(takers, daemonCommands) {
			t.Errorf("--%s is a flag of %q, want %q", name, takers, daemonCommands)
		}
	}
}

// TestDaemonFlagsWherePlacedCase: after a command that takes them the
// daemon flags are read (absolute containerd address); before the
// command name, where they were global flags, or after a command that
// opens no daemon they are a usage error naming the commands that take
// them.
func TestDaemonFlagsWherePlacedCase(t *testing.T) {
	tmp := t.TempDir()
	t.Chdir(tmp)
	code, errOut := probe(t, []string{"reap"}, func(c *cli.Context) {
		s, err := loadSettings(c)
		if err != nil {
			t.Fatal(err)
		}
		got := []any{s.daemons, s.dockerHost, s.containerdAddress, s.containerdNamespace}
		want := []any{true, "unix:///d.sock", filepath.Join(tmp, "c.sock"), "ns"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("reap --docker-host unix:///d.sock --containerd-address c.sock --containerd-namespace ns: settings %v, want %v", got, want)
		}
	}, "reap", "--docker-host", "unix:///d.sock", "--containerd-address", "c.sock", "--containerd-namespace", "ns")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, tc := range []struct {
		flag string
		args []string
	}{
		{"docker-host", []string{"--docker-host", "unix:///d.sock", "serve"}},
		{"containerd-address", []string{"--containerd-address=/c.sock", "exec", "--", "true"}},
		{"containerd-namespace", []string{"--containerd-namespace", "ns", "images", "list"}},
		{"docker-host", []string{"locate", "--session-id", "a", "--docker-host", "unix:///d.sock"}},
		{"containerd-namespace", []string{"bench", "service", "--containerd-namespace", "ns"}},
	} {
		_, errOut, code := run(t, tc.args...)
		named := !slices.ContainsFunc(daemonCommands, func(c string) bool { return !strings.Contains(errOut, c) })
		if code != 2 || !strings.Contains(errOut, "--"+tc.flag+" is a flag of the commands that use the daemons") || !named {
			t.Errorf("%q: exit %d, stderr %q; want 2 saying --%s is a flag of %s", tc.args, code, errOut, tc.flag, strings.Join(daemonCommands, ", "))
		}
	}
	// Any other unknown flag keeps the library's message alone.
	if _, errOut, code := run(t, "--bogus", "x", "serve"); code != 2 || strings.Contains(errOut, "daemons") {
		t.Errorf("--bogus: exit %d, stderr %q; want 2 without the daemon hint", code, errOut)
	}
}

// TestDaemonFlagsConfigAndEnvCase: the daemon flags keep their
// DSH_SANDBOX_* variables and their --config keys: at the top level for
// every command that takes them, or in such a command's section; the
// section of a command that does not take them refuses them.
func TestDaemonFlagsConfigAndEnvCase(t *testing.T) {
	home := t.TempDir()
	cfg := writeConfig(t, "docker-host: unix:///top.sock\ncontainerd-namespace: top\nserve: {containerd-namespace: section}\n")
	for _, tc := range []struct {
		name, env string
		want      []string // docker host, containerd address, namespace
	}{
		{"file", "", []string{"unix:///top.sock", "/run/containerd/containerd.sock", "section"}},
		{"environment over file", "DSH_SANDBOX_DOCKER_HOST=unix:///env.sock", []string{"unix:///env.sock", "/run/containerd/containerd.sock", "section"}},
		{"environment, address", "DSH_SANDBOX_CONTAINERD_ADDRESS=/env/c.sock", []string{"unix:///top.sock", "/env/c.sock", "section"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if k, v, ok := strings.Cut(tc.env, "="); ok {
				t.Setenv(k, v)
			}
			code, errOut := probe(t, []string{"serve"}, func(c *cli.Context) {
				s, err := loadSettings(c)
				if err != nil {
					t.Fatal(err)
				}
				if got := []string{s.dockerHost, s.containerdAddress, s.containerdNamespace}; !reflect.DeepEqual(got, tc.want) {
					t.Errorf("serve sees %q, want %q", got, tc.want)
				}
			}, "--config", cfg, "--home", home, "serve")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
		})
	}
	// A command that takes no daemon flag runs with the top-level keys.
	if _, errOut, code := run(t, "--config", cfg, "--home", home, "locate", "--no-cwd", "--session-id", "a"); code != 0 {
		t.Errorf("locate with daemon keys at the top level: exit %d, stderr %q", code, errOut)
	}
	for _, tc := range []struct{ text, want string }{
		{"locate: {docker-host: unix:///x.sock}\n", `unknown key "locate.docker-host"`},
		{"bench: {service: {containerd-address: /c.sock}}\n", `unknown key "bench.service.containerd-address"`},
		{"containerd-namespace: 5\n", "containerd-namespace is an integer; want a string"},
	} {
		cfg := writeConfig(t, tc.text)
		if _, errOut, code := run(t, "--config", cfg, "locate", "--no-cwd", "--session-id", "a"); code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("--config with %q: exit %d, stderr %q; want 2 naming %q", tc.text, code, errOut, tc.want)
		}
	}
}

// TestBackendConfigNeedsDaemonFlags: a command without the daemon flags
// cannot open a daemon backend (it would reach the default daemon, not
// the operator's); one with them passes their values on.
func TestBackendConfigNeedsDaemonFlags(t *testing.T) {
	s := &settings{stateDir: t.TempDir(), dataDir: t.TempDir()}
	for _, name := range []sandbox.Backend{sandbox.BackendDocker, sandbox.BackendContainerd} {
		d, ok := backends.Lookup(name)
		if !ok {
			t.Fatalf("no backend %s", name)
		}
		if _, err := s.backendConfig(d); !errors.Is(err, sandbox.ErrInternal) || !strings.Contains(err.Error(), "--docker-host") {
			t.Errorf("backendConfig(%s) without the daemon flags = %v, want an internal error naming them", name, err)
		}
	}
	oci, _ := backends.Lookup(sandbox.BackendOCI)
	if _, err := s.backendConfig(oci); err != nil {
		t.Errorf("backendConfig(oci) without the daemon flags: %v", err)
	}
	s.daemons, s.dockerHost = true, "unix:///d.sock"
	docker, _ := backends.Lookup(sandbox.BackendDocker)
	cfg, err := s.backendConfig(docker)
	if err != nil || !reflect.DeepEqual(cfg.Options, s.backendOptions(sandbox.BackendDocker)) {
		t.Errorf("backendConfig(docker) = %+v, %v; want the options of --docker-host", cfg.Options, err)
	}
}
