package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/request"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/childenv"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/render"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/secrets"
)

// maxStdinBytes bounds --stdin-file.
const maxStdinBytes = 64 << 20

func execCommand() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run one call (bash -c CMD, or an exact argv) in a fresh container; stream its output; exit with its code",
		ArgsUsage: "-- COMMAND | -- PROGRAM ARG…",
		Description: `One argument after -- runs as bash -c ARG (sh -c where the image has no bash); several run
as exactly that argv, with no shell joining or parsing them (PROGRAM is looked up in the
child's PATH): "exec -- printf '%s\n' 'c;d'" prints c;d.

The child's environment is the image's base, the policy's inherited and set variables,
terminal settings, and last the DSH_* snapshot of the session. The session's transcript
directory is mounted read-only at its own path; the workspace (--cwd) per policy.

Stdin: a piped or redirected stdin is read whole (at most 64 MiB) and fed to the command
("echo hello | dsh-sandbox exec -- cat" prints hello), so a caller that leaves a pipe open
must close it or redirect </dev/null; a terminal gives an empty stdin; -i streams stdin as
it arrives, of any size; --stdin-file FILE (- for stdin) reads a file whole. -t runs the
command on a terminal inside the container ("exec -t -- bash"): stdin must be a terminal,
which is raw until the call ends; the output is one stream (see docs/policy.md, tty).

A --policy FILE must be owned by root or the invoking user, writable by nobody else, and
lie outside the workspace (--cwd) and the --workspace-roots: a policy a sandboxed call could
have written is refused. It is opened without following links and must be a regular file.
With --server, --policy NAME is sent as it is and the service resolves it among its own
policies; a FILE is refused (the API takes no policy body).

Per-call flags narrow the policy, never widen it: --memory, --cpus, --pids, --timeout and
--network ask for at most what the policy allows (more is refused naming the flag, exit 2).
--mount SRC:DST[:ro] adds a bind mount only where the policy's mountRoots allow it: SRC
at or below a root (read-write only below a root of mode rw), resolved without following
links, neither inside nor holding the dsh home, the sessions root or the state and data
directories. --env-file adds KEY=VALUE lines (# comments; DSH_* keys dropped) before
--env. With --server the service checks them against its own policy.

With --json, stdout holds one JSON document: the result, or, when the call did not run,
the service's error object {"error":{"class","field","message"}} (the message is on
stderr too).

Exit codes: the child's; 128+N when killed by signal N; 124 on timeout; 125 when the
sandbox itself failed, or --server refused or could not take the call (unauthorized,
forbidden, still overloaded after retrying 429s per Retry-After for up to 30s, unreachable):
nothing ran; 2 for usage errors.

Examples:
   dsh-sandbox exec --session-id s1 --cwd /srv/proj -- 'ls -la; env | grep ^DSH_'
   dsh-sandbox exec --policy read-only --timeout 5s -- 'cat "$DSH_SESSION_JSONL" | wc -l'
   dsh-sandbox exec --runtime runsc --json -- uname -a`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "policy", Value: policy.WorkspaceWrite, Usage: "policy `NAME` (read-only, workspace-write, ci) or FILE (.yaml/.json, operator-owned, outside the workspace)"},
			&cli.StringFlag{Name: "image", Usage: "override the policy's image: host, a name from `images list`, or a registry `REF` (NAME:TAG or NAME@sha256:…) pulled as the policy's pull and verify.keys say"},
			&cli.StringFlag{Name: "workdir", Usage: "working `DIR` inside the container (default: the session cwd, else /tmp)"},
			&cli.DurationFlag{Name: "timeout", Usage: "call timeout, e.g. 30s (default: the policy's, 120s; more than its maximum is refused)"},
			&cli.StringSliceFlag{Name: "env", Usage: "ordinary environment `K=V` for the child (repeatable; never DSH_*)"},
			&cli.StringFlag{Name: "stdin-file", Usage: "feed `FILE` (- for the CLI's stdin) to the command's stdin, read whole, at most 64 MiB"},
			&cli.BoolFlag{Name: "interactive", Aliases: []string{"i"}, Usage: "stream the CLI's stdin into the command as it arrives (any size; with --server too)"},
			&cli.BoolFlag{Name: "detach", Aliases: []string{"d"}, Usage: "start the call as a background job of the service (--server, else the local one at <home>/run/sandbox.sock) and print its job id; follow it with jobs output ID, stop it with jobs kill ID"},
			&cli.BoolFlag{Name: "tty", Aliases: []string{"t"}, Usage: "run the command on a terminal inside the container (implies -i; stdin must be a terminal; output is one terminal stream; local calls only)"},
			&cli.StringFlag{Name: "server", Usage: "send the call to a running service at `ADDR` (unix:///PATH or tcp://HOST:PORT)"},
			&cli.StringFlag{Name: "token-file", Usage: "bearer token `FILE` (mode 0600) for --server over TCP"},
			jsonFlag,
		}, slices.Concat(overrideFlags(), narrowFlags(), daemonFlags())...),
		Action: runExec,
	}
}

// runExec runs the call; with --json, a call that did not run (or whose
// outcome is unknown) prints the service's error object on stdout too
// (jsonError, for every command), so stdout always holds one JSON document.
func runExec(c *cli.Context) error {
	s, err := loadSettings(c)
	if err != nil {
		return err
	}
	if c.NArg() == 0 {
		return usageError("exec needs a command after --")
	}
	req, err := s.execRequest(c)
	if err != nil {
		return err
	}
	if c.Bool("detach") {
		return s.execDetached(c, req)
	}
	if addr := c.String("server"); addr != "" {
		if req.Argv != nil {
			return usageError("--server: the service takes one command string; several arguments after -- are an argv, which it does not take yet (quote the command as one argument)")
		}
		return s.execRemote(c, addr, req)
	}
	if err := s.checkCallPaths(req.Policy); err != nil {
		return err
	}
	ex, closeEx, err := s.newExecutor(req.Policy)
	if err != nil {
		return err
	}
	defer closeEx()
	if err := reapBeforeCalls(c.Context, ex); err != nil {
		s.log.Warn().Err(err).Msg("reaping leftovers of earlier instances failed")
	}
	asJSON := c.Bool("json")
	if !asJSON {
		req.Stdout, req.Stderr = c.App.Writer, c.App.ErrWriter
	}
	restore := func() {}
	if req.Terminal != nil {
		if restore, err = startTerminal(c, req); err != nil {
			return err
		}
		defer restore()
	}
	res, err := ex.Run(c.Context, req)
	// The output was redacted as it was captured; the egress record and
	// the error text are redacted here, as the service does.
	res, err = secrets.RedactOutcome(req.Policy, detector, res, err)
	restore()
	if err != nil {
		return err
	}
	return finishExec(c, res, asJSON)
}

// finishExec ends `exec` after a call ran, locally or through the
// service: the result as JSON, or notes on stderr (the output was
// streamed), and the child's exit code.
func finishExec(c *cli.Context, res *sandbox.Result, asJSON bool) error {
	if asJSON {
		if err := writeJSON(c.App.Writer, res); err != nil {
			return err
		}
	} else {
		if res.TimedOut {
			fmt.Fprintf(c.App.ErrWriter, "dsh-sandbox: timed out after %dms\n", res.TimeoutMs)
		}
		for _, st := range []sandbox.Stream{res.Stdout, res.Stderr} {
			if st.SpillPath != "" {
				fmt.Fprintf(c.App.ErrWriter, "dsh-sandbox: full output: %s\n", st.SpillPath)
			}
		}
		printDenials(c.App.ErrWriter, res.Egress)
	}
	if code := sandbox.ExitCode(res, nil); code != 0 {
		return &childExit{code}
	}
	return nil
}

// maxDenialLines bounds the denied hosts exec names on stderr; the rest
// are counted on one more line.
const maxDenialLines = 10

// printDenials prints one line per host the egress policy denied the
// call (host, port, the rule; how many connections when several), so
// that a denial does not pass for a network fault.
func printDenials(w io.Writer, egress []sandbox.Connection) {
	denials := render.Denials(egress)
	for i, d := range denials {
		if i == maxDenialLines {
			fmt.Fprintf(w, "dsh-sandbox: and %d more denied hosts (--json lists every connection)\n", len(denials)-i)
			return
		}
		times := ""
		if d.Count > 1 {
			times = fmt.Sprintf(", %d connections", d.Count)
		}
		fmt.Fprintf(w, "dsh-sandbox: denied connection to %s (%s%s)\n", net.JoinHostPort(d.Host, strconv.Itoa(int(d.Port))), d.Reason, times)
	}
}

// execRequest builds the request of `exec` from the flags: the policy with
// its overrides and the per-call narrowing, the DSH_* snapshot and the
// session (buildRequest). With --server only the policy's name goes in
// it: the service resolves and narrows its own policy and takes the
// snapshot (execRemote).
func (s *settings) execRequest(c *cli.Context) (*sandbox.Request, error) {
	n, err := narrowing(c)
	if err != nil {
		return nil, err
	}
	var req *sandbox.Request
	if c.String("server") != "" {
		name, err := remotePolicy(c.String("policy"))
		if err != nil {
			return nil, err
		}
		req = &sandbox.Request{Policy: sandbox.Policy{Name: name}}
	} else {
		pol, err := s.execPolicy(c)
		if err != nil {
			return nil, err
		}
		if req, err = s.buildRequest(c.Context, pol, n, true); err != nil {
			return nil, err
		}
	}
	req.Workdir = c.String("workdir")
	// One argument is a command line for bash -c; several are an argv,
	// run exactly (DESIGN §4), never joined into a shell string.
	if args := c.Args().Slice(); len(args) == 1 {
		req.Command = args[0]
	} else {
		req.Argv = args
	}
	req.TimeoutMs = n.TimeoutMs
	if f := c.String("env-file"); f != "" {
		env, err := readEnvFile(f, warnf(c))
		if err != nil {
			return nil, err
		}
		req.Env = append(req.Env, env...)
	}
	for _, kv := range c.StringSlice("env") {
		name, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || name == "":
			return nil, usageError("--env: %q is not NAME=VALUE", name)
		case childenv.IsDSHName(name):
			return nil, usageError("--env: %s: DSH_* variables come only from the trusted snapshot", name)
		case strings.ContainsRune(kv, 0):
			return nil, usageError("--env: %s: the value contains a NUL byte", name)
		}
		req.Env = append(req.Env, kv)
	}
	if err := execStdin(c, req); err != nil {
		return nil, err
	}
	return req, nil
}

// buildRequest is request.Build for the CLI's own calls (exec, mcp, hooks
// run): pol narrowed by n, the session the global flags name with its
// workspace (the cleaned cwd; a call with no agent still works in its
// directory) and its transcript from the configured persistence, owned
// by the harness user; withSnapshot adds the DSH_* snapshot. A narrowing
// refusal is a usage error naming the flag.
func (s *settings) buildRequest(ctx context.Context, pol sandbox.Policy, n policy.Narrowing, withSnapshot bool) (*sandbox.Request, error) {
	in := request.Input{
		Policy:    pol,
		Narrowing: n,
		Protected: s.protectedPaths(),
		Header:    s.header,
		Workspace: s.cwd,
		Locator:   s.locator(),
		Owner:     harnessOwner(),
	}
	if withSnapshot {
		in.Snapshot = func(ctx context.Context) ([]string, error) {
			snap, err := s.snapshot(ctx)
			return snap.Environ(), err
		}
	}
	req, err := request.Build(ctx, in)
	var ne *policy.NarrowError
	if errors.As(err, &ne) {
		return nil, usageError("%s: %s", narrowFlagNames[ne.Field], ne.Reason)
	}
	return req, err
}

// remotePolicy is the policy name `exec --server` sends for --policy: the
// service resolves it among the policies it knows. A policy file is
// refused naming the flag: the API takes no policy body, and a file the
// CLI reads is not one the service trusts.
func remotePolicy(nameOrFile string) (string, error) {
	if _, builtin := policy.Builtin(nameOrFile); !builtin && isPolicyFile(nameOrFile) {
		return "", usageError("--policy: %s is a policy file; with --server name a policy the service knows (serve --policy-file, --policy-dir): the API takes no policy body", nameOrFile)
	}
	return nameOrFile, nil
}

// execStdin sets the command's stdin: --interactive streams the CLI's
// stdin; --stdin-file reads a file, or the CLI's stdin for "-", whole;
// without either, a CLI stdin that is not a terminal (a pipe, a file) is
// read whole, and a terminal gives an empty stdin. Whole reads stop at
// maxStdinBytes.
func execStdin(c *cli.Context, req *sandbox.Request) error {
	f := c.String("stdin-file")
	in := c.App.Reader
	if c.Bool("tty") {
		return execTTY(c, req)
	}
	switch {
	case c.Bool("interactive") && f != "":
		return usageError("--interactive: streams the CLI's stdin; not together with --stdin-file")
	case c.Bool("interactive"):
		req.StdinReader = in
		return nil
	case f == "-" || (f == "" && !isTerminal(in)):
		name := "--stdin-file -"
		if f == "" {
			name = "stdin"
		}
		data, err := io.ReadAll(io.LimitReader(in, maxStdinBytes+1))
		if err != nil {
			return usageError("%s: %v", name, err)
		}
		if len(data) > maxStdinBytes {
			return usageError("%s: more than %d bytes; stream it with -i", name, maxStdinBytes)
		}
		req.Stdin = data
	case f != "":
		data, err := readBounded(f, maxStdinBytes)
		if err != nil {
			return usageError("--stdin-file: %v", err)
		}
		req.Stdin = data
	}
	return nil
}

// isTerminal reports whether r is a character device (a terminal, or
// /dev/null, which gives nothing either): such a stdin is not read
// without --interactive.
func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return r == nil
	}
	fi, err := f.Stat()
	return err != nil || fi.Mode()&os.ModeCharDevice != 0
}

// harnessOwner is the user who runs the CLI, by its real uid:gid: it owns
// the session directory. SUDO_UID and SUDO_GID are not trusted.
func harnessOwner() sandbox.Owner {
	return sandbox.Owner{UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Set: true}
}

// execPolicy loads --policy (a built-in, or an operator-owned file
// outside the workspace: operatorPolicy) and applies the overrides. The
// local backend runs only when a policy file names it, never through
// --backend.
func (s *settings) execPolicy(c *cli.Context) (sandbox.Policy, error) {
	p, err := s.operatorPolicy("policy", c.String("policy"), true)
	if err != nil {
		return sandbox.Policy{}, err
	}
	if b := sandbox.Backend(c.String("backend")); b != "" {
		d, err := flagBackend("--backend", b, nil, "")
		if err != nil {
			return sandbox.Policy{}, err
		}
		if d.Explicit && p.Backend != b {
			return sandbox.Policy{}, usageError("--backend %s: this unsandboxed backend runs only when a policy file says backend: %s", b, b)
		}
		p.Backend = b
	}
	if r := c.String("runtime"); r != "" {
		p.Runtime = sandbox.Runtime(r)
	}
	if i := c.String("image"); i != "" {
		p.Image = i
	}
	return policy.Normalize(p)
}

func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, limit)
	}
	return data, nil
}
