package main

import (
	"context"
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/contributors"
	"github.com/dsh-sandbox/dsh-sandbox/overlay"
)

func envCommand() *cli.Command {
	return &cli.Command{
		Name:  "env",
		Usage: "inspect the DSH_* facts a call gets",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "list the declared DSH_* keys: key, owner, description, built-in or not",
				Description: `Runs no resolver; it only reads the declarations.

--json prints the body of the service's GET /v1/env:
{"declarations":[{"key","owner","description","builtIn"}]}.

Example:
   dsh-sandbox env list --json`,
				Flags: []cli.Flag{jsonFlag},
				Action: func(c *cli.Context) error {
					s, err := loadSettings(c)
					if err != nil {
						return err
					}
					r, err := s.registry()
					if err != nil {
						return err
					}
					decls := r.List()
					if c.Bool("json") {
						return writeJSON(c.App.Writer, api.Declarations(decls))
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
					fmt.Fprintln(tw, "KEY\tOWNER\tBUILT-IN\tDESCRIPTION")
					for _, d := range decls {
						fmt.Fprintf(tw, "%s\t%s\t%t\t%s\n", d.Key, d.Owner, d.BuiltIn, d.Description)
					}
					return tw.Flush()
				},
			},
			{
				Name:  "show",
				Usage: "print the exact DSH_* snapshot a call of this session would get, KEY=VALUE sorted",
				Description: `Without --session-id the call has no agent: only DSH_HOME and DSH_SHELL.
With --persistence sqlite there is no DSH_SESSION_JSONL. Nothing is created. --json prints
the body of the service's POST /v1/snapshot: {"env":["KEY=VALUE",…]}.

Example:
   dsh-sandbox env show --home /h --sessions-root /r --cwd /srv/proj --session-id abc`,
				Flags: []cli.Flag{jsonFlag},
				Action: func(c *cli.Context) error {
					s, err := loadSettings(c)
					if err != nil {
						return err
					}
					snap, err := s.snapshot(c.Context)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return writeJSON(c.App.Writer, types.SnapshotResponse{Env: snap.Environ()})
					}
					for _, kv := range snap.Environ() {
						fmt.Fprintln(c.App.Writer, kv)
					}
					return nil
				},
			},
		},
	}
}

// registry returns a DSH_* registry with the built-in contributors, whose
// transcript contributor asks this configuration's persistence.
func (s *settings) registry() (*overlay.Registry, error) {
	r := overlay.NewRegistry()
	if _, err := contributors.Install(r, s.locator); err != nil {
		return nil, err
	}
	return r, nil
}

// snapshot collects the DSH_* snapshot for the configured session.
func (s *settings) snapshot(ctx context.Context) (overlay.Snapshot, error) {
	r, err := s.registry()
	if err != nil {
		return overlay.Snapshot{}, err
	}
	return r.Collect(ctx, overlay.Execution{Home: s.home, Session: s.header})
}
