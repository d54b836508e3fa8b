package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// reapTarget is one backend (and runtime) reap looks at.
type reapTarget struct {
	policy sandbox.Policy
	label  string
}

func reapTargets() []reapTarget {
	var ts []reapTarget
	for _, rt := range []string{"runc", "crun", "runsc"} {
		ts = append(ts, reapTarget{sandbox.Policy{Backend: "oci", Runtime: rt}, "oci/" + rt})
	}
	for _, b := range []string{"docker", "containerd"} {
		ts = append(ts, reapTarget{sandbox.Policy{Backend: b}, b})
	}
	return ts
}

func reapCommand() *cli.Command {
	return &cli.Command{
		Name:  "reap",
		Usage: "remove containers, snapshots, bundles, mounts and cgroups left by a crashed instance",
		Description: `Finds what earlier dsh-sandbox instances on --state-dir left behind (their lock is no
longer held) and removes it: for every installed OCI runtime, and in the Docker engine and
containerd (this project's objects, found by label). Live instances are left alone. A
backend that is not installed or whose daemon does not answer is skipped, unless --backend
names it: then that is an error (exit 125). exec runs the same reaping for its backend when
it starts, and serve for every backend its policies name.

Examples:
   dsh-sandbox reap
   dsh-sandbox reap --backend docker --json`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "backend", Usage: "reap only this backend: oci, docker or containerd"},
			jsonFlag,
		},
		Action: func(c *cli.Context) error {
			s, err := loadSettings(c)
			if err != nil {
				return err
			}
			only := c.String("backend")
			switch only {
			case "", "oci", "docker", "containerd":
			default:
				return usageError("--backend: %q is not a backend with leftovers (oci, docker or containerd)", only)
			}
			type result struct {
				Backend string `json:"backend"`
				Removed int    `json:"removed"`
				Report  any    `json:"report,omitempty"`
				Skipped string `json:"skipped,omitempty"`
				Error   string `json:"error,omitempty"`
			}
			var results []result
			var firstErr error
			for _, t := range reapTargets() {
				if only != "" && t.policy.Backend != only {
					continue
				}
				ex, closeEx, err := s.newExecutor(t.policy)
				if err != nil {
					if only != "" {
						// Named explicitly: an unusable backend is an error.
						results = append(results, result{Backend: t.label, Error: err.Error()})
						if firstErr == nil {
							firstErr = err
						}
						continue
					}
					results = append(results, result{Backend: t.label, Skipped: err.Error()})
					continue
				}
				rep, n, err := reapExecutor(c.Context, ex)
				closeEx()
				r := result{Backend: t.label, Removed: n, Report: rep}
				if err != nil {
					r.Error = err.Error()
					if firstErr == nil {
						firstErr = err
					}
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
				case r.Skipped != "":
					fmt.Fprintf(c.App.Writer, "%s: skipped (%s)\n", r.Backend, r.Skipped)
				case r.Error != "":
					fmt.Fprintf(c.App.Writer, "%s: removed %d objects; FAILED: %s\n", r.Backend, r.Removed, r.Error)
				case r.Removed == 0:
					fmt.Fprintf(c.App.Writer, "%s: nothing left behind\n", r.Backend)
				default:
					fmt.Fprintf(c.App.Writer, "%s: removed %d objects: %s\n", r.Backend, r.Removed, describeReport(r.Report))
				}
			}
			return firstErr
		},
	}
}
