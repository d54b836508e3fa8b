package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func policyCommand() *cli.Command {
	return &cli.Command{
		Name:  "policy",
		Usage: "validate sandbox policies and explain them",
		Subcommands: []*cli.Command{{
			Name:      "check",
			Usage:     "validate a policy and explain what a call under it may read, write, reach and use",
			ArgsUsage: "NAME|FILE",
			Description: `NAME is a built-in profile (read-only, workspace-write, ci); FILE is a YAML or JSON
policy. Prints the normalized policy and a plain explanation; with the session flags it
also warns when the chosen user cannot read the workspace or the transcript, and when a
call from --cwd would be refused: a workspace behind a symbolic link, a system directory,
one outside --workspace-roots, or a read-write workspace holding the dsh home, the
sessions root or the state directory.
Exits 2 when the policy is invalid, naming the field.

Examples:
   dsh-sandbox policy check workspace-write
   dsh-sandbox policy check --session-id s1 --cwd /srv/proj ./strict.yaml`,
			Flags: []cli.Flag{jsonFlag},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usageError("policy check takes one NAME or FILE, got %d arguments", c.NArg())
				}
				s, err := loadSettings(c)
				if err != nil {
					return err
				}
				p, err := policy.LoadChecked(c.Args().First(), policy.FileChecks{Backends: backends.Names(nil)})
				if err != nil {
					return err
				}
				sess := sandbox.Session{Cwd: s.cwd}
				if s.header != nil {
					sess.ID = s.header.ID
					if loc, ok := s.locator().Locate(*s.header); ok && loc.Kind == persistence.KindJSONL {
						sess.TranscriptDir = filepath.Dir(loc.Path)
					}
				}
				var warnings []string
				for _, ch := range s.pathChecks(p.Workspace) {
					if !ch.OK {
						warnings = append(warnings, fmt.Sprintf("a call from --cwd %s is refused (%s): %s", s.cwd, ch.Name, ch.Detail))
					}
				}
				sessionText, sessionWarnings := policy.ExplainSession(p, sess)
				warnings = append(warnings, sessionWarnings...)
				if c.Bool("json") {
					return writeJSON(c.App.Writer, struct {
						Policy      sandbox.Policy `json:"policy"`
						Explanation string         `json:"explanation"`
						Warnings    []string       `json:"warnings"`
					}{p, policy.Explain(p) + sessionText, warnings})
				}
				formatted, err := policy.Format(p)
				if err != nil {
					return err
				}
				w := c.App.Writer
				fmt.Fprintf(w, "# policy %s (%s) is valid\n", p.Name, p.Digest)
				w.Write(formatted)
				fmt.Fprintln(w)
				fmt.Fprint(w, policy.Explain(p)+sessionText)
				for _, warn := range warnings {
					fmt.Fprintf(os.Stderr, "warning: %s\n", warn)
				}
				return nil
			},
		}},
	}
}
