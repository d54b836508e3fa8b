package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/oci"
)

func reapCommand() *cli.Command {
	return &cli.Command{
		Name:  "reap",
		Usage: "remove containers, bundles, mounts and cgroups left by a crashed instance",
		Description: `Finds what earlier dsh-sandbox instances on --state-dir left behind (their lock is no
longer held) for every installed OCI runtime and removes it. Live instances are left alone.
exec runs the same reaping when it starts.

Example:
   dsh-sandbox reap --json`,
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			s, err := loadSettings(c)
			if err != nil {
				return err
			}
			type result struct {
				Runtime string          `json:"runtime"`
				Report  *oci.ReapReport `json:"report,omitempty"`
				Error   string          `json:"error,omitempty"`
			}
			var results []result
			var firstErr error
			for _, rt := range []string{"runc", "crun", "runsc"} {
				ex, err := oci.New(oci.Options{Runtime: rt, StateDir: s.stateDir, Logger: s.log})
				if err != nil {
					results = append(results, result{Runtime: rt, Error: err.Error()})
					continue
				}
				rep, err := ex.Reap(c.Context)
				ex.Close()
				r := result{Runtime: rt, Report: &rep}
				if err != nil {
					r.Error = err.Error()
					firstErr = err
				}
				results = append(results, r)
			}
			if c.Bool("json") {
				if err := writeJSON(c.App.Writer, results); err != nil {
					return err
				}
				return firstErr
			}
			for _, r := range results {
				switch {
				case r.Report == nil:
					fmt.Fprintf(c.App.Writer, "%s: skipped (%s)\n", r.Runtime, r.Error)
				case r.Report.Empty():
					fmt.Fprintf(c.App.Writer, "%s: nothing left behind\n", r.Runtime)
				default:
					fmt.Fprintf(c.App.Writer, "%s: removed %d containers, %d bundles, %d mounts, %d cgroups of %d dead instances\n",
						r.Runtime, len(r.Report.Containers), len(r.Report.Bundles), len(r.Report.Mounts), len(r.Report.Cgroups), len(r.Report.Instances))
				}
			}
			return firstErr
		},
	}
}
