package main

import (
	"context"
	"os"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/mcpserver"
	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
)

func mcpCommand() *cli.Command {
	return &cli.Command{
		Name:  "mcp",
		Usage: "serve the bash, job_output and job_kill tools over MCP on stdio",
		Description: `A Model Context Protocol server on stdin/stdout for agents that speak MCP (Claude Code,
Codex, Cursor, ...). Every bash call runs in its own container through the same executor as
exec, under --policy, for the session the global flags name (--session-id, --cwd, --home,
--sessions-root, ...): the DSH_* snapshot and the transcript mount are the operator's, and the
model can pass neither environment nor stdin. Foreground results are rendered as dsh's bash
tool renders them; with run_in_background bash returns a job id at once, job_output returns
the job's new output and job_kill stops it. Bad arguments are tool errors and run nothing.
Logs go to stderr; stdout carries only the protocol. Background jobs are killed when the
client disconnects.

Registration (see docs/mcp.md):
   claude mcp add dsh-sandbox -- dsh-sandbox mcp --policy workspace-write
   Codex config.toml: [mcp_servers.dsh-sandbox] command = "dsh-sandbox", args = ["mcp"]

Examples:
   dsh-sandbox mcp --policy workspace-write --session-id s1 --cwd /srv/proj
   dsh-sandbox mcp --policy read-only --runtime runsc`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "policy", Value: policy.WorkspaceWrite, Usage: "policy `NAME` (read-only, workspace-write, ci) or FILE (.yaml/.json, operator-owned, outside the workspace)"},
			&cli.StringFlag{Name: "image", Usage: "override the policy's image: host or a name from `images list`"},
			&cli.IntFlag{Name: "max-jobs", Value: api.DefaultMaxJobsPerSession, Usage: "background jobs that have not ended before bash refuses another (0: no limit)"},
			&cli.DurationFlag{Name: "job-ttl", Value: api.DefaultJobTTL, Usage: "how long an ended background job stays readable (0: until the server ends)"},
		}, slices.Concat(overrideFlags(), poolFlags(), daemonFlags())...),
		Action: runMCP,
	}
}

func runMCP(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageError("mcp takes no arguments, got %q", c.Args().First())
	}
	s, err := loadSettings(c)
	if err != nil {
		return err
	}
	if c.Int("max-jobs") < 0 {
		return usageError("--max-jobs: must not be negative, got %d", c.Int("max-jobs"))
	}
	if c.Duration("job-ttl") < 0 {
		return usageError("--job-ttl: must not be negative, got %s", c.Duration("job-ttl"))
	}
	if s.pool, err = poolOptions(c, nil); err != nil {
		return err
	}
	pol, err := s.execPolicy(c)
	if err != nil {
		return err
	}
	if err := s.checkCallPaths(pol); err != nil {
		return err
	}
	reg, err := s.registry()
	if err != nil {
		return err
	}
	// Every call gets this session; its DSH_* snapshot is taken per call.
	base, err := s.buildRequest(c.Context, pol, policy.Narrowing{}, false)
	if err != nil {
		return err
	}
	// Fail closed before serving: a policy whose backend cannot be built
	// is an error at start, not on the model's first call.
	ex, closeEx, err := s.newExecutor(pol)
	if err != nil {
		return err
	}
	defer closeEx()
	if err := reapBeforeCalls(c.Context, ex); err != nil {
		s.log.Warn().Err(err).Msg("reaping leftovers of earlier instances failed")
	}
	srv, err := mcpserver.New(mcpserver.Options{
		Executor: redacting{ex},
		Policy:   pol,
		Session:  base.Session,
		Snapshot: func(ctx context.Context) ([]string, error) {
			snap, err := reg.Collect(ctx, overlay.Execution{Home: s.home, Session: s.header})
			if err != nil {
				return nil, err
			}
			return snap.Environ(), nil
		},
		MaxLiveJobs: c.Int("max-jobs"),
		JobTTL:      c.Duration("job-ttl"),
		Version:     version,
		Logger:      s.log,
	})
	if err != nil {
		return err
	}
	return srv.Run(c.Context, &mcpserver.StdioTransport{In: os.Stdin, Out: os.Stdout})
}
