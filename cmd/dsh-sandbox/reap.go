package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// reapers keeps the backends that leave objects to reap.
func reapers(d *backend.Descriptor) bool { return d.Reaps }

// reapResult is one backend's (and runtime's) entry of `reap --json`.
type reapResult struct {
	// Backend is the target's label: "oci/runc", "docker".
	Backend string `json:"backend"`
	// Removed is Report.Removed().
	Removed int          `json:"removed"`
	Report  *reap.Report `json:"report,omitempty"`
	Skipped string       `json:"skipped,omitempty"`
	Error   string       `json:"error,omitempty"`
}

func reapCommand() *cli.Command {
	return &cli.Command{
		Name:  "reap",
		Usage: "remove containers, snapshots, bundles, mounts and cgroups left by a crashed instance",
		Description: `Finds what earlier dsh-sandbox instances on --state-dir left behind (their lock is no
longer held) and removes it: for every installed OCI runtime, and in the Docker engine and
containerd (this project's objects, found by label), and what killed image imports and pulls
left in the local image store (--data-dir). Live instances are left alone. A
backend that is not installed or whose daemon does not answer is skipped, unless --backend
names it: then that is an error (exit 125). exec runs the same reaping for its backend when
it starts, and serve for every backend its policies name.

Examples:
   dsh-sandbox reap
   dsh-sandbox reap --backend docker --json`,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "backend", Usage: "reap only this backend: " + sandbox.JoinModes(backends.Names(reapers), ", ")},
			jsonFlag,
		}, daemonFlags()...),
		Action: runReap,
	}
}

func runReap(c *cli.Context) error {
	s, err := loadSettings(c)
	if err != nil {
		return err
	}
	only := sandbox.Backend(c.String("backend"))
	if only != "" {
		if _, err := flagBackend("--backend", only, reapers, " with leftovers"); err != nil {
			return err
		}
	}
	var results []reapResult
	var firstErr error
	for _, t := range backends.Targets(reapers) {
		if only != "" && t.Name != only {
			continue
		}
		r, err := s.reapTarget(c.Context, t, only != "")
		if err != nil && firstErr == nil {
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
		case r.Skipped != "":
			fmt.Fprintf(c.App.Writer, "%s: skipped (%s)\n", r.Backend, r.Skipped)
		case r.Error != "":
			fmt.Fprintf(c.App.Writer, "%s: removed %d objects; FAILED: %s\n", r.Backend, r.Removed, r.Error)
		case r.Removed == 0:
			fmt.Fprintf(c.App.Writer, "%s: nothing left behind\n", r.Backend)
		default:
			fmt.Fprintf(c.App.Writer, "%s: removed %d objects: %s\n", r.Backend, r.Removed, r.Report)
		}
	}
	return firstErr
}

// reapTarget reaps target t, and the local image store's staging once
// for the runtimes that share it. A target that cannot be opened is
// skipped, unless named (--backend): then it is an error. The error
// returned is the result's.
func (s *settings) reapTarget(ctx context.Context, t backend.Target, named bool) (reapResult, error) {
	ex, closeEx, err := s.openTarget(ctx, t)
	if err != nil {
		if named {
			// Named explicitly: an unusable backend is an error.
			return reapResult{Backend: t.Label(), Error: err.Error()}, err
		}
		return reapResult{Backend: t.Label(), Skipped: err.Error()}, nil
	}
	rep, err := reapExecutor(ctx, ex)
	closeEx()
	if t.Images == backend.ImagesLocal && (len(t.Runtimes) == 0 || t.Runtime == t.Runtimes[0]) {
		// Once for the store all runtimes share.
		if st, serr := s.openImages(); serr == nil {
			err = errors.Join(err, reapStaging(st, &rep))
		}
	}
	r := reapResult{Backend: t.Label(), Removed: rep.Removed(), Report: &rep}
	if err != nil {
		r.Error = err.Error()
	}
	return r, err
}
