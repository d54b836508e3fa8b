package policy

import (
	"fmt"
	"io/fs"
	"math"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Identity is the uid and gid a call runs as (from ResolveUser).
type Identity = sandbox.Identity

// Plan returns what a call under p for session s, running as id, sees of
// the host (sandbox.Plan): its mounts, default workdir, spill directory
// and the directories to create. Every consumer reads it: SpecOpts and
// Mounts (the oci and containerd specs), the docker backend's container
// configuration, the audit record, hook mounts, Explain, ExplainPlan and
// Warnings; prepare.Call and prepare.Paths build the same plan with
// sandbox.NewPlan.
//
// It is pure: it reads no file (the backends resolve the paths, see
// prepare.Paths). p is validated first as SpecOpts does (its
// environment settings aside; zero limits and an empty runtime count as
// their defaults). Errors wrap sandbox.ErrInvalid and name the field: an
// invalid policy, an id of 4294967295, a session path that is not
// absolute and clean or lies on /, /proc, /dev or /sys, the workspace and
// transcript on the same path, or a policy mount or tmpfs that overlaps
// them.
func Plan(p sandbox.Policy, s sandbox.Session, id Identity) (sandbox.Plan, error) {
	if err := checkForCall(&p); err != nil {
		return sandbox.Plan{}, err
	}
	if id.UID == math.MaxUint32 || id.GID == math.MaxUint32 {
		return sandbox.Plan{}, invalidf("user %d:%d: 4294967295 is not a valid id", id.UID, id.GID)
	}
	if err := checkSession(p, s); err != nil {
		return sandbox.Plan{}, err
	}
	return sandbox.NewPlan(p, s, id), nil
}

// checkForCall validates p as Normalize does, without the copy, sort and
// digest that a call does not need, filling an empty runtime and zero
// limits with their defaults. The environment settings are not looked at:
// prepare.Call builds the environment (dropping DSH_* and
// secret-shaped names, DESIGN §3.6), and the stricter check that refuses
// such names in a policy file is Load's.
func checkForCall(p *sandbox.Policy) error {
	p.EnvInherit, p.EnvAllowSecrets, p.EnvSet = nil, nil, nil
	if p.Runtime == "" {
		p.Runtime = DefaultRuntime
	}
	p.Limits = LimitsOrDefault(p.Limits)
	var ps problems
	validate(p, nil, &ps)
	return ps.err("policy")
}

// checkSession refuses session paths a valid policy p may not mount for
// s: a mounted workspace or session directory that is not absolute and
// clean or lies on /, /proc, /dev or /sys, both on the same path, and a
// tmpfs or policy mount that overlaps them.
func checkSession(p sandbox.Policy, s sandbox.Session) error {
	var ps problems
	var roles []role
	if p.Workspace.Mounted() && s.Cwd != "" {
		if checkSessionPath("session.cwd", s.Cwd, &ps) {
			roles = append(roles, role{"session.cwd", s.Cwd})
		}
	}
	if p.Transcript.Mounted() && s.TranscriptDir != "" {
		if checkSessionPath("session.transcriptDir", s.TranscriptDir, &ps) {
			roles = append(roles, role{"session.transcriptDir", s.TranscriptDir})
		}
	}
	if len(roles) == 2 && roles[0].path == roles[1].path {
		ps.add("session.transcriptDir", "%q is also the workspace (session.cwd); the transcript must stay read-only", s.TranscriptDir)
	}
	for i, t := range p.CallTmpfs() {
		for _, r := range roles {
			if within(t.Target, r.path) {
				ps.add(fmt.Sprintf("tmpfs[%d].target", i), "%q would hide %s %q", t.Target, r.field, r.path)
			}
		}
	}
	for i, m := range p.Mounts {
		for _, r := range roles {
			if within(m.Target, r.path) || within(r.path, m.Target) {
				ps.add(fmt.Sprintf("mounts[%d].target", i), "%q overlaps %s %q", m.Target, r.field, r.path)
			}
		}
	}
	return ps.err("policy")
}

type role struct{ field, path string }

// SpecMounts spells the mounts of plan as OCI spec mounts, in the plan's
// order: a tmpfs with its mode (and, for all but /tmp, uid and gid) and
// size; a bind as a non-recursive bind, "rw" or "ro", with nosuid, nodev
// and noexec as the plan says.
func SpecMounts(plan sandbox.Plan) []specs.Mount {
	out := make([]specs.Mount, 0, len(plan.Mounts))
	for _, m := range plan.Mounts {
		out = append(out, specMount(m))
	}
	return out
}

func specMount(m sandbox.PlanMount) specs.Mount {
	var opts []string
	if m.Bind() {
		opts = append(opts, "bind")
	}
	if m.NoSuid {
		opts = append(opts, "nosuid")
	}
	if m.NoDev {
		opts = append(opts, "nodev")
	}
	if m.Bind() {
		opts = append(opts, map[bool]string{true: "rw", false: "ro"}[m.Writable])
		if m.NoExec {
			opts = append(opts, "noexec")
		}
		return specs.Mount{Destination: m.Target, Type: "bind", Source: m.Source, Options: opts}
	}
	if m.NoExec {
		opts = append(opts, "noexec")
	}
	if !m.Writable {
		opts = append(opts, "ro")
	}
	opts = append(opts, "mode="+modeString(m.Mode))
	if m.Owner != nil {
		opts = append(opts, "uid="+strconv.FormatUint(uint64(m.Owner.UID), 10), "gid="+strconv.FormatUint(uint64(m.Owner.GID), 10))
	}
	if m.SizeBytes > 0 {
		opts = append(opts, "size="+strconv.FormatInt(m.SizeBytes, 10))
	}
	return specs.Mount{Destination: m.Target, Type: "tmpfs", Source: "tmpfs", Options: opts}
}

// modeString is a tmpfs mode option's octal value: "1777", "0755".
func modeString(m fs.FileMode) string {
	v := uint32(m.Perm())
	if m&fs.ModeSticky != 0 {
		v |= 0o1000
	}
	return fmt.Sprintf("%04o", v)
}
