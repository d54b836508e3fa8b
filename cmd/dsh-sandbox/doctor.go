package main

import (
	"fmt"
	"os/exec"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/oci"
)

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "say which runtimes and daemons are usable here, and why not",
		Description: `Checks each OCI runtime (runc, crun, runsc): binary, version, root, cgroups, the state
directory, and a real sandboxed call of true. Leaves nothing behind. Exits 125 when the
default runtime (runc) is unusable.

Example:
   dsh-sandbox doctor --json`,
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			s, err := loadSettings(c)
			if err != nil {
				return err
			}
			type report struct {
				Backend string      `json:"backend"`
				Runtime string      `json:"runtime,omitempty"`
				Usable  bool        `json:"usable"`
				Checks  []oci.Check `json:"checks"`
			}
			var reports []report
			for _, rt := range []string{"runc", "crun", "runsc"} {
				checks := oci.Doctor(c.Context, oci.Options{Runtime: rt, StateDir: s.stateDir, Logger: s.log})
				usable := len(checks) > 0
				for _, ch := range checks {
					usable = usable && ch.OK
				}
				reports = append(reports, report{"oci", rt, usable, checks})
			}
			for _, daemon := range []string{"docker", "containerd"} {
				detail := "backend not built yet (see the Docker and containerd issue)"
				if _, err := exec.LookPath(daemon); err != nil {
					detail = daemon + " is not installed; backend not built yet"
				}
				reports = append(reports, report{daemon, "", false, []oci.Check{{Name: "backend", OK: false, Detail: detail}}})
			}
			var failure error
			if !reports[0].Usable {
				failure = sandbox.Errorf(sandbox.ErrUnavailable, "the default runtime runc is not usable here")
			}
			if c.Bool("json") {
				if err := writeJSON(c.App.Writer, reports); err != nil {
					return err
				}
				return failure
			}
			for _, r := range reports {
				name := r.Backend
				if r.Runtime != "" {
					name += "/" + r.Runtime
				}
				verdict := "usable"
				if !r.Usable {
					verdict = "NOT usable"
				}
				fmt.Fprintf(c.App.Writer, "%s: %s\n", name, verdict)
				for _, ch := range r.Checks {
					mark := "ok  "
					if !ch.OK {
						mark = "FAIL"
					}
					fmt.Fprintf(c.App.Writer, "  %s %-8s %s\n", mark, ch.Name, ch.Detail)
				}
			}
			return failure
		},
	}
}
