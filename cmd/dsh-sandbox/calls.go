package main

import (
	"fmt"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/client"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// serviceFlags name the service that `calls` and `jobs` talk to: calls
// and jobs live in a running `serve` (a CLI process ends with its call).
func serviceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "server", Usage: "the service at `ADDR` (unix:///PATH or tcp://HOST:PORT; default unix://<home>/run/sandbox.sock, where serve listens by default)"},
		&cli.StringFlag{Name: "token-file", Usage: "`FILE` holding the bearer token for a TCP service"},
		jsonFlag,
	}
}

// serviceClient returns the client of the service --server names, or of
// the local one serve starts by default; addr is what it connects to.
func serviceClient(c *cli.Context, s *settings) (cl *client.Client, addr string, err error) {
	addr = c.String("server")
	if addr == "" {
		addr = "unix://" + filepath.Join(s.home, "run", "sandbox.sock")
	}
	var token string
	if f := c.String("token-file"); f != "" {
		if token, err = api.ReadToken(f); err != nil {
			return nil, "", usageError("--token-file: %v", err)
		}
	}
	if cl, err = client.New(addr, client.Options{Token: token}); err != nil {
		return nil, "", usageError("--server: %v", err)
	}
	return cl, addr, nil
}

func callsCommand() *cli.Command {
	return &cli.Command{
		Name:      "calls",
		Usage:     "list the running calls of a service, or stop one (calls kill ID)",
		ArgsUsage: "[kill ID]",
		Description: `Lists this client's executions of the service that have not ended: foreground runs
and background jobs (exec --detach), queued or running, with their execution id, kind, job
id, session, policy, backend, state and start. "calls kill ID" stops one by its execution id
(the container is stopped: SIGTERM, a grace, SIGKILL) and waits until it has ended.

Calls live in a service: without --server this is the local one at <home>/run/sandbox.sock
(dsh-sandbox serve). A client sees only its own calls.

Examples:
   dsh-sandbox calls
   dsh-sandbox calls --json --server tcp://127.0.0.1:7070 --token-file ~/.dsh/token
   dsh-sandbox calls kill 0d4c6f1e2a3b4c5d`,
		Flags:  serviceFlags(),
		Action: runCalls,
	}
}

// serviceArgs loads the settings, checks the positional arguments with
// ok (want says what they may be) and connects to the service.
func serviceArgs(c *cli.Context, ok func(args []string) bool, want string) (s *settings, cl *client.Client, addr string, args []string, err error) {
	if s, err = loadSettings(c); err != nil {
		return nil, nil, "", nil, err
	}
	if args = c.Args().Slice(); !ok(args) {
		return nil, nil, "", nil, usageError("%s takes %s; got %q", c.Command.Name, want, args)
	}
	cl, addr, err = serviceClient(c, s)
	return s, cl, addr, args, err
}

// printKilled reports that the call or job id was stopped.
func printKilled(c *cli.Context, id string) error {
	if c.Bool("json") {
		return writeJSON(c.App.Writer, map[string]any{"id": id, "killed": true})
	}
	_, err := fmt.Fprintf(c.App.Writer, "killed %s\n", id)
	return err
}

func runCalls(c *cli.Context) error {
	_, cl, addr, args, err := serviceArgs(c, func(a []string) bool { return len(a) == 0 || len(a) == 2 && a[0] == "kill" }, "no arguments, or kill ID")
	if err != nil {
		return err
	}
	if len(args) == 2 {
		if err := cl.CancelCall(c.Context, args[1]); err != nil {
			return remoteError(addr, err)
		}
		return printKilled(c, args[1])
	}
	calls, err := cl.Calls(c.Context)
	if err != nil {
		return remoteError(addr, err)
	}
	if c.Bool("json") {
		if calls == nil {
			calls = []types.CallInfo{}
		}
		return writeJSON(c.App.Writer, types.CallsResponse{Calls: calls})
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tJOB\tSESSION\tPOLICY\tBACKEND\tSTATE\tSTARTED")
	for _, ci := range calls {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", ci.ID, ci.Kind, dash(ci.JobID), dash(ci.SessionID), ci.Policy, ci.Backend, ci.State, ci.Started.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func jobsCommand() *cli.Command {
	return &cli.Command{
		Name:      "jobs",
		Usage:     "list a session's background jobs, read one's output (jobs output ID) or stop it (jobs kill ID)",
		ArgsUsage: "[output ID | kill ID]",
		Description: `Background jobs are calls started with exec --detach (or POST /v1/jobs); they belong to
the session that started them (--session-id; none for a call with no agent). "jobs" lists
them; "jobs output ID" prints the output produced since the previous read (stdout on
stdout, stderr on stderr) and, once the job has ended, exits with its exit code; "jobs kill
ID" stops it and waits until it has ended.

Jobs live in a service: without --server this is the local one at <home>/run/sandbox.sock.

Examples:
   id=$(dsh-sandbox exec --detach --session-id s1 -- 'sleep 5; echo done')
   dsh-sandbox jobs --session-id s1
   dsh-sandbox jobs output --session-id s1 "$id"
   dsh-sandbox jobs kill --session-id s1 "$id"`,
		Flags:  serviceFlags(),
		Action: runJobs,
	}
}

func runJobs(c *cli.Context) error {
	s, cl, addr, args, err := serviceArgs(c, func(a []string) bool {
		return len(a) == 0 || len(a) == 2 && (a[0] == "output" || a[0] == "kill")
	}, "no arguments, output ID or kill ID")
	if err != nil {
		return err
	}
	sessionID := ""
	if s.header != nil {
		sessionID = s.header.ID
	}
	if len(args) == 0 {
		jobs, err := cl.Jobs(c.Context, sessionID)
		if err != nil {
			return remoteError(addr, err)
		}
		if c.Bool("json") {
			return writeJSON(c.App.Writer, map[string]any{"jobs": jobs})
		}
		tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tDONE\tSTARTED\tCOMMAND")
		for _, j := range jobs {
			fmt.Fprintf(tw, "%s\t%t\t%s\t%q\n", j.ID, j.Done, j.Started.Local().Format(time.DateTime), j.Command)
		}
		return tw.Flush()
	}
	id := args[1]
	if args[0] == "kill" {
		if err := cl.KillJob(c.Context, sessionID, id); err != nil {
			return remoteError(addr, err)
		}
		return printKilled(c, id)
	}
	out, err := cl.JobOutput(c.Context, sessionID, id)
	if err != nil {
		return remoteError(addr, err)
	}
	if c.Bool("json") {
		if err := writeJSON(c.App.Writer, out); err != nil {
			return err
		}
	} else {
		fmt.Fprint(c.App.Writer, out.Stdout)
		fmt.Fprint(c.App.ErrWriter, out.Stderr)
	}
	if out.Err != nil {
		return out.Err
	}
	if out.Done && out.Result != nil && out.Result.ExitCode != nil && *out.Result.ExitCode != 0 {
		return &childExit{*out.Result.ExitCode}
	}
	return nil
}

// runRequest is the service request of the call req: the session flags,
// the policy by name and the narrowing flags.
func (s *settings) runRequest(c *cli.Context, req *sandbox.Request) (types.RunRequest, error) {
	rr := types.RunRequest{
		Session:        s.header,
		Policy:         req.Policy.Name,
		Command:        req.Command,
		Workdir:        req.Workdir,
		TimeoutMs:      req.TimeoutMs,
		StdoutMaxBytes: req.StdoutMaxBytes,
		Env:            req.Env,
	}
	if s.header == nil {
		rr.Cwd = s.cwd
	}
	n, err := narrowing(c)
	if err != nil {
		return types.RunRequest{}, err
	}
	if n.WorkspaceBytes > 0 {
		// The API has no such field: never drop a bound silently.
		return types.RunRequest{}, usageError("--workspace-bytes: not available with --server (the service's API has no per-call workspace bound); set limits.workspaceBytes in the service's policy")
	}
	narrowRun(&rr, n)
	return rr, nil
}

// execDetached is `exec --detach`: the call starts as a background job of
// the service (--server, else the local one) and its job id is printed;
// jobs output and jobs kill follow it.
func (s *settings) execDetached(c *cli.Context, req *sandbox.Request) error {
	switch {
	case c.Bool("tty"):
		return usageError("--detach: not together with --tty (a detached call has no terminal)")
	case c.Bool("interactive") || c.String("stdin-file") != "":
		return usageError("--detach: the job's stdin is empty; not together with -i or --stdin-file")
	case req.Argv != nil:
		return usageError("--detach: the service takes one command string; quote the command as one argument")
	}
	for _, f := range []string{"backend", "runtime", "image"} {
		if c.IsSet(f) {
			return usageError("--%s: not available with --detach; name a policy the service knows", f)
		}
	}
	rr, err := s.runRequest(c, req)
	if err != nil {
		return err
	}
	cl, addr, err := serviceClient(c, s)
	if err != nil {
		return err
	}
	id, err := cl.StartJob(c.Context, rr)
	if err != nil {
		return remoteError(addr, err)
	}
	if c.Bool("json") {
		return writeJSON(c.App.Writer, map[string]string{"jobId": id})
	}
	_, err = fmt.Fprintln(c.App.Writer, id)
	return err
}
