package main

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/hostpath"
)

// The host paths a call started from the command line mounts are checked
// here before any backend is touched (DESIGN §3.8 "paths"): the
// workspace (--cwd) is resolved without following links and may not be a
// system directory or lie outside --workspace-roots, and what the
// service trusts (the dsh home, the sessions root, the state and data
// directories, the SQLite database) may not lie inside a workspace the
// call sees, read-write or read-only. The sandbox layer checks the same paths again right
// before the mount (prepare.Paths); this is the early, explained
// refusal. `exec` and `hooks run` refuse; `policy check` and `doctor`
// report.

// checkCallPaths returns the first refused path of a call under pol
// from s.cwd as a usage error (exit 2) naming the paths; nil when the
// shape is allowed.
func (s *settings) checkCallPaths(pol sandbox.Policy) error {
	for _, ch := range s.pathChecks(pol.Workspace) {
		if !ch.OK {
			return usageError("%s", ch.Detail)
		}
	}
	return nil
}

// pathChecks checks the deployment shape of a call whose workspace is
// s.cwd mounted per workspace ("rw", "ro" or "none"), one finding per
// rule: "workspace" (resolves without links, not a system directory),
// "workspace-roots" (inside one of them, when set) and "deployment"
// (nothing trusted inside a read-write workspace). Nothing is reported
// for a call without a cwd.
func (s *settings) pathChecks(workspace sandbox.WorkspaceMode) []doctor.Check {
	if s.cwd == "" {
		return nil
	}
	var checks []doctor.Check
	add := func(name string, ok bool, format string, args ...any) {
		checks = append(checks, doctor.Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	mounted := workspace.Mounted()
	ws := filepath.Clean(s.cwd)
	switch {
	case !mounted:
		add("workspace", true, "--cwd %s is not mounted (policy workspace %q)", ws, workspace)
	default:
		r, err := hostpath.ResolveDir("--cwd", s.cwd)
		switch {
		case err != nil:
			add("workspace", false, "%v", err)
			return checks // nothing else can be judged
		case hostpath.SystemDir(r):
			add("workspace", false, "--cwd %s is a system directory and may never be a workspace", r)
			return checks
		}
		ws = r
		add("workspace", true, "--cwd %s resolves without links and is not a system directory", ws)
	}
	if len(s.workspaceRoots) > 0 {
		if root, ok := s.workspaceRoot(ws); ok {
			add("workspace-roots", true, "--cwd %s lies in the workspace root %s", ws, root)
		} else {
			add("workspace-roots", false, "--cwd %s lies outside --workspace-roots %s", ws, strings.Join(s.workspaceRoots, ":"))
		}
	}
	if !mounted {
		// Read-only counts too: a call that can read the sessions root
		// reads every session's transcript, and the state dir holds
		// other calls' bundles and spill files.
		return checks
	}
	if err := hostpath.CheckDeployment(ws, s.protectedPaths()); err != nil {
		add("deployment", false, "%v", strings.TrimPrefix(err.Error(), "sandbox: "))
	} else {
		add("deployment", true, "the sessions root %s, dsh home %s and state dir %s lie outside the workspace %s", s.sessionsRoot, s.home, s.stateDir, ws)
	}
	return checks
}

// protectedPaths are what the service trusts and no call may reach: the
// dsh home, the sessions root, the state and data directories, with
// SQLite persistence the database, and the operator's files of this run
// (operatorFiles). `serve` adds its audit log and sockets.
func (s *settings) protectedPaths() map[string]string {
	p := map[string]string{
		"sessions root": s.sessionsRoot,
		"dsh home":      s.home,
		"state dir":     s.stateDir,
		"data dir":      s.dataDir,
	}
	if s.persistence == "sqlite" {
		p["SQLite database"] = s.sqlitePath
	}
	maps.Copy(p, s.operatorFiles)
	return p
}

// operatorFiles are the files the operator configured this run with, as
// absolute paths by name: the --config file, the --token-file, serve's
// --audit-key, the policy files (serve's --policy-file and --policy-dir,
// and a --policy that names a file). A call that could write one would
// choose its own sandbox; one that could read the token file or the
// audit key would hold the service's credentials. A flag the command does not have adds nothing.
func operatorFiles(c *cli.Context) (map[string]string, error) {
	out := map[string]string{}
	add := func(name, flag, v string) error {
		if v == "" {
			return nil
		}
		abs, err := absFlag(flag, v)
		out[name] = abs
		return err
	}
	if err := errors.Join(
		add("config file", "config", newFlags(c).String("config")),
		add("registry credentials", "registry-auth", newFlags(c).String("registry-auth")),
		add("token file", "token-file", c.String("token-file")),
		add("audit key", "audit-key", c.String("audit-key")),
		add("policy dir", "policy-dir", c.String("policy-dir")),
	); err != nil {
		return nil, err
	}
	if v := c.String("policy"); isPolicyFile(v) {
		if err := add("policy file", "policy", v); err != nil {
			return nil, err
		}
	}
	for i, f := range c.StringSlice("policy-file") {
		if err := add(fmt.Sprintf("policy file %d", i+1), "policy-file", f); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// workspaceRoot returns the --workspace-roots entry ws lies in (the
// roots are resolved once, by loadSettings).
func (s *settings) workspaceRoot(ws string) (string, bool) {
	for _, root := range s.workspaceRoots {
		if hostpath.Within(ws, root) {
			return root, true
		}
	}
	return "", false
}
