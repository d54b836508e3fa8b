package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/egress"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/quota"
)

// daemonHint says how to get a daemon backend's daemon, when it is not
// installed here.
func daemonHint(d *backend.Daemon) string {
	if _, err := exec.LookPath(d.Binary); err != nil {
		return fmt.Sprintf(" (%s is not installed: apt-get install %s)", d.Binary, d.Package)
	}
	return fmt.Sprintf(" (%s is installed: is it running, and is the address right?)", d.Binary)
}

// workspaceQuotaCheck says whether limits.workspaceBytes can be enforced
// on the workspace ws (quota.Check): a policy that sets it is refused
// where it cannot.
func workspaceQuotaCheck(ws string) doctor.Check {
	if err := quota.Check(ws); err != nil {
		return doctor.Check{Name: "quota", Detail: fmt.Sprintf("limits.workspaceBytes cannot be enforced on --cwd: %v; calls of a policy that sets it are refused here", err)}
	}
	return doctor.Check{Name: "quota", OK: true, Detail: fmt.Sprintf("--cwd %s can be bounded (a btrfs subvolume with quota enabled, or project quotas): limits.workspaceBytes is enforced", ws)}
}

// doctors keeps the backends that have a doctor.
func doctors(d *backend.Descriptor) bool { return d.Doctor != nil }

func doctorCommand() *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "say which runtimes and daemons are usable here, and why not",
		Description: `Checks each OCI runtime (runc, crun, runsc): binary, version, root, cgroups, the state
directory, and a real sandboxed call of true. Checks the Docker engine (--docker-host) and
containerd (--containerd-address, --containerd-namespace): the daemon answers, its
runtimes, whether the engine remaps user namespaces, an image imported by dsh-sandbox, and a
real call on it. Leaves nothing behind.
The "deployment" entry checks the paths a call from --cwd would mount read-write: the
workspace resolves without links, is no system directory, lies in --workspace-roots, and
holds neither the dsh home, the sessions root nor the state or data directory.
With --policy-file or --policy-dir (as serve takes them), the "credentials" entry checks
that the value of each network.credentials entry of those policies can be read now (the
service's variable is set, the operator-owned file is readable, the upstream CA file holds
certificates), naming the source, never the value.
The "workspace-quota" entry says whether --cwd can be bounded, which a policy's
limits.workspaceBytes needs: the root of a btrfs subvolume on a file system with quota enabled
(btrfs quota enable), or a file system enforcing project quotas (ext4 with the quota and
project features, or XFS, mounted with prjquota); where not, calls of such a policy are refused.
Exits 125 when the default runtime (runc) is unusable.

Example:
   dsh-sandbox doctor --json`,
		Flags: append([]cli.Flag{jsonFlag,
			&cli.StringSliceFlag{Name: "policy-file", Usage: "also check the credential sources of policy `FILE` (repeatable)"},
			&cli.StringFlag{Name: "policy-dir", Usage: "also check the credential sources of the policies in `DIR`"},
		}, daemonFlags()...),
		Action: runDoctor,
	}
}

// doctorReport is one entry of doctor's report: a backend's target, or
// one of the checks of this host ("deployment", "credentials",
// "workspace-quota").
type doctorReport struct {
	Backend string         `json:"backend"`
	Runtime string         `json:"runtime,omitempty"`
	Usable  bool           `json:"usable"`
	Checks  []doctor.Check `json:"checks"`
}

func runDoctor(c *cli.Context) error {
	s, err := loadSettings(c)
	if err != nil {
		return err
	}
	reports := s.backendReports(c.Context)
	if checks := s.pathChecks("rw"); len(checks) > 0 {
		reports = append(reports, doctorReport{Backend: "deployment", Checks: checks})
	}
	files, err := servePolicyFiles(c.StringSlice("policy-file"), c.String("policy-dir"))
	if err != nil {
		return err
	}
	if checks, err := s.credentialChecks(files); err != nil {
		return err
	} else if len(checks) > 0 {
		reports = append(reports, doctorReport{Backend: "credentials", Checks: checks})
	}
	if s.cwd != "" {
		reports = append(reports, doctorReport{Backend: "workspace-quota", Checks: []doctor.Check{workspaceQuotaCheck(s.cwd)}})
	}
	for i := range reports {
		r := &reports[i]
		r.Usable = len(r.Checks) > 0
		for _, ch := range r.Checks {
			r.Usable = r.Usable && ch.OK
		}
	}
	var failure error
	if !reports[0].Usable {
		failure = sandbox.Errorf(sandbox.ErrUnavailable, "the default backend %s is not usable here", backends.Targets(doctors)[0].Label())
	}
	if c.Bool("json") {
		if err := writeJSON(c.App.Writer, reports); err != nil {
			return err
		}
		return failure
	}
	printDoctor(c.App.Writer, reports)
	return failure
}

// backendReports runs the doctor of each backend's targets, the default
// first; a failed daemon check says how to reach the daemon.
func (s *settings) backendReports(ctx context.Context) []doctorReport {
	var reports []doctorReport
	for _, t := range backends.Targets(doctors) {
		r := doctorReport{Backend: string(t.Name), Runtime: string(t.Runtime)}
		cfg, err := s.backendConfig(t.Descriptor)
		if err != nil {
			r.Checks = []doctor.Check{{Name: "config", Detail: err.Error()}}
		} else {
			r.Checks = t.Doctor(ctx, cfg, t.Runtime)
		}
		for j, ch := range r.Checks {
			if !ch.OK && ch.Name == "daemon" && t.Needs.Daemon != nil {
				r.Checks[j].Detail += daemonHint(t.Needs.Daemon)
			}
		}
		reports = append(reports, r)
	}
	return reports
}

// printDoctor writes reports for people: each entry's verdict, then its
// checks.
func printDoctor(w io.Writer, reports []doctorReport) {
	for _, r := range reports {
		name := r.Backend
		if r.Runtime != "" {
			name += "/" + r.Runtime
		}
		verdict := "usable"
		if !r.Usable {
			verdict = "NOT usable"
		}
		fmt.Fprintf(w, "%s: %s\n", name, verdict)
		for _, ch := range r.Checks {
			mark := "ok  "
			if !ch.OK {
				mark = "FAIL"
			}
			fmt.Fprintf(w, "  %s %-8s %s\n", mark, ch.Name, ch.Detail)
		}
	}
}

// credentialChecks checks, for every network.credentials entry of the
// policies in files, that its value and upstream CA can be read now
// (egress.CheckCredentialSource), naming the source and never the
// value.
func (s *settings) credentialChecks(files []string) ([]doctor.Check, error) {
	pols, err := s.servePolicies(files)
	if err != nil {
		return nil, err
	}
	var checks []doctor.Check
	for _, name := range slices.Sorted(maps.Keys(pols)) {
		for _, c := range pols[name].Credentials {
			from := "the service's variable " + c.ValueEnv
			if c.ValueFile != "" {
				from = "the file " + c.ValueFile
			}
			ch := doctor.Check{Name: "credential", OK: true, Detail: fmt.Sprintf("policy %s, credential %q for %s:%d: %s is readable", name, c.Name, c.Host, c.Port, from)}
			if err := egress.CheckCredentialSource(c, os.LookupEnv); err != nil {
				ch.OK, ch.Detail = false, fmt.Sprintf("policy %s, %v", name, err)
			}
			checks = append(checks, ch)
		}
	}
	return checks, nil
}
