package main

import (
	"fmt"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func auditCommand() *cli.Command {
	return &cli.Command{
		Name:  "audit",
		Usage: "inspect the service's audit log",
		Subcommands: []*cli.Command{{
			Name:      "verify",
			Usage:     "check the audit log's hash chain; exit 1 at the first broken line",
			ArgsUsage: "FILE",
			Description: `Every record carries the sha256 of the line before it, so an edited, removed or
reordered line breaks the chain at the line after it. Prints the record count and the head
hash; keep the head elsewhere to detect a cut or rewritten tail.

Example:
   dsh-sandbox audit verify /var/lib/dsh-sandbox/audit.jsonl`,
			Flags: []cli.Flag{jsonFlag},
			Action: func(c *cli.Context) error {
				if c.NArg() != 1 {
					return usageError("audit verify needs exactly one FILE")
				}
				f, err := os.Open(c.Args().First())
				if err != nil {
					return sandbox.Errorf(sandbox.ErrNotFound, "audit log: %v", err)
				}
				defer f.Close()
				n, head, verr := api.VerifyAudit(f)
				if c.Bool("json") {
					out := struct {
						Records int    `json:"records"`
						Head    string `json:"head"`
						OK      bool   `json:"ok"`
						Error   string `json:"error,omitempty"`
					}{n, head, verr == nil, ""}
					if verr != nil {
						out.Error = verr.Error()
					}
					if err := writeJSON(c.App.Writer, out); err != nil {
						return err
					}
				} else if verr == nil {
					fmt.Fprintf(c.App.Writer, "ok: %d records, head %s\n", n, head)
				}
				if verr != nil {
					return fmt.Errorf("audit log %s: %w", c.Args().First(), verr)
				}
				return nil
			},
		}},
	}
}
