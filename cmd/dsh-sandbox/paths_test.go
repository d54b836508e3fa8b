package main

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestCheckCallPaths(t *testing.T) {
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(base, "ws")
	if err := os.MkdirAll(filepath.Join(ws, ".dsh"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(ws, "link")
	if err := os.Symlink("/", link); err != nil {
		t.Fatal(err)
	}
	good := func() *settings {
		return &settings{cwd: ws, home: filepath.Join(base, "home"), sessionsRoot: filepath.Join(base, "home", "sessions"),
			stateDir: "/run/dsh-sandbox", dataDir: "/var/lib/dsh-sandbox", persistence: "jsonl"}
	}
	rw := sandbox.Policy{Workspace: "rw"}
	tests := []struct {
		name    string
		mutate  func(s *settings)
		pol     sandbox.Policy
		mention []string // nil = allowed
	}{
		{"legitimate", func(s *settings) {}, rw, nil},
		{"inside the workspace roots", func(s *settings) { s.workspaceRoots = []string{base} }, rw, nil},
		{"no cwd", func(s *settings) { s.cwd = "" }, rw, nil},
		{"ro workspace holding the home", func(s *settings) { s.home = filepath.Join(ws, ".dsh") }, sandbox.Policy{Workspace: "ro"}, []string{"dsh home", "inside the workspace"}},
		{"unmounted link cwd", func(s *settings) { s.cwd = link }, sandbox.Policy{Workspace: "none"}, nil},
		{"link cwd", func(s *settings) { s.cwd = link }, rw, []string{"--cwd", "symbolic link"}},
		{"below a link", func(s *settings) { s.cwd = link + "/tmp" }, rw, []string{"--cwd", "symbolic link"}},
		{"system dir", func(s *settings) { s.cwd = "/etc" }, rw, []string{"--cwd /etc", "system directory"}},
		{"root", func(s *settings) { s.cwd = "/" }, sandbox.Policy{Workspace: "ro"}, []string{"system directory"}},
		{"outside the roots", func(s *settings) { s.workspaceRoots = []string{"/srv/projects"} }, rw, []string{"--workspace-roots", "/srv/projects"}},
		{"home and sessions root inside", func(s *settings) {
			s.home = filepath.Join(ws, ".dsh")
			s.sessionsRoot = filepath.Join(ws, ".dsh", "sessions")
		}, rw, []string{ws + "/.dsh/sessions", ws + "/.dsh", "workspace " + ws}},
		{"state dir inside", func(s *settings) { s.stateDir = filepath.Join(ws, "state") }, rw, []string{"state dir"}},
		{"sqlite inside", func(s *settings) { s.persistence = "sqlite"; s.sqlitePath = filepath.Join(ws, "s.sqlite") }, rw, []string{"SQLite database"}},
		{"workspace in the sessions root", func(s *settings) { s.sessionsRoot = base }, rw, []string{"lies inside the sessions root"}},
	}
	for _, tt := range tests {
		s := good()
		tt.mutate(s)
		err := s.checkCallPaths(tt.pol)
		if tt.mention == nil {
			if err != nil {
				t.Errorf("checkCallPaths(%s) = %v, want nil", tt.name, err)
			}
			continue
		}
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("checkCallPaths(%s) = %v, want a usage error", tt.name, err)
			continue
		}
		for _, m := range tt.mention {
			if !strings.Contains(err.Error(), m) {
				t.Errorf("checkCallPaths(%s) = %q, want it to name %q", tt.name, err, m)
			}
		}
	}
}

// TestProtectedPathsHoldOperatorFiles: the config file, serve's policy
// files and --policy-dir and the token file are protected: a mount
// source (CheckMountSources) that holds one is refused, one beside them
// is not.
func TestProtectedPathsHoldOperatorFiles(t *testing.T) {
	dir := t.TempDir()
	mk := func(rel, text string) string {
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	cfg := mk("conf/dsh-sandbox.yaml", "log-level: warn\n")
	token := mk("secrets/token", "tok-0123456789abcdef\n")
	pfile := mk("pol/extra.yaml", "name: extra\n")
	pdir := filepath.Join(dir, "poldir")
	mk("poldir/other.yaml", "name: other\n")
	free := filepath.Join(dir, "free")
	if err := os.Mkdir(free, 0o755); err != nil {
		t.Fatal(err)
	}
	var protected map[string]string
	code, errOut := probe(t, []string{"serve"}, func(c *cli.Context) {
		s, err := loadSettings(c)
		if err != nil {
			t.Fatal(err)
		}
		protected = s.protectedPaths()
	}, "--config", cfg, "--no-cwd", "serve", "--token-file", token, "--policy-file", pfile, "--policy-dir", pdir)
	if code != 0 {
		t.Fatalf("serve: exit %d, %s", code, errOut)
	}
	for name, want := range map[string]string{"config file": cfg, "token file": token, "policy file 1": pfile, "policy dir": pdir} {
		if protected[name] != want {
			t.Errorf("protectedPaths()[%q] = %q, want %q", name, protected[name], want)
		}
	}
	for _, tc := range []struct {
		src     string
		refused bool
	}{
		{filepath.Join(dir, "conf"), true},
		{filepath.Join(dir, "secrets"), true},
		{filepath.Join(dir, "pol"), true},
		{pdir, true},
		{dir, true},
		{free, false},
	} {
		err := policy.CheckMountSources([]sandbox.Mount{{Source: tc.src, Target: "/m", ReadOnly: true}}, protected)
		if (err != nil) != tc.refused {
			t.Errorf("CheckMountSources(%s) = %v, want refused %v", tc.src, err, tc.refused)
		}
	}
}
