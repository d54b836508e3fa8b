package api

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// GenesisHash is the Prev of the first record of an audit log.
const GenesisHash = "0000000000000000000000000000000000000000000000000000000000000000"

// maxAuditLine bounds one audit line when reading a log back.
const maxAuditLine = 4 << 20

// AuditRecord is one line of the audit log: one execution, foreground or
// background. It holds env variable names only, never values, and the
// sha256 of the command, never its text.
type AuditRecord struct {
	Time        time.Time `json:"time"`
	ExecutionID string    `json:"executionId"`
	SessionID   string    `json:"sessionId,omitempty"`
	// Client is the key of the client that asked for the call
	// (Client.Key: "socket:UID" or "token:NAME").
	Client       string `json:"client,omitempty"`
	CallID       string `json:"callId,omitempty"`
	Background   bool   `json:"background,omitempty"`
	Policy       string `json:"policy"`
	PolicyDigest string `json:"policyDigest,omitempty"`
	Backend      string `json:"backend"`
	Runtime      string `json:"runtime,omitempty"`
	Image        string `json:"image"`
	// ImageDigest is the digest of the image the call ran
	// (sandbox.Info.ImageDigest); absent for the host image.
	ImageDigest   string   `json:"imageDigest,omitempty"`
	ContainerID   string   `json:"containerId,omitempty"`
	CommandSHA256 string   `json:"commandSha256"`
	EnvNames      []string `json:"envNames"`
	// Mounts are the host paths the call was given, in mount order: the
	// binds of its plan (policy.Plan), which the backend enforced.
	Mounts   []AuditMount `json:"mounts"`
	Timings  AuditTimings `json:"timings"`
	ExitCode *int         `json:"exitCode"`
	Signal   string       `json:"signal,omitempty"`
	TimedOut bool         `json:"timedOut"`
	Aborted  bool         `json:"aborted"`
	// Error is the sandbox error's class and message when the call failed
	// in the sandbox itself (nothing ran or the outcome is unknown).
	Error        string `json:"error,omitempty"`
	StdoutBytes  int64  `json:"stdoutBytes"`
	StderrBytes  int64  `json:"stderrBytes"`
	DroppedBytes int64  `json:"droppedBytes"`
	// Egress are the connections of a call of network allowlist: host,
	// port, bytes each way, verdict and reason (sandbox.Result.Egress).
	Egress []sandbox.Connection `json:"egress,omitempty"`
	// Prev is the hex sha256 of the previous line (without its newline),
	// GenesisHash for the first line.
	Prev string `json:"prev"`
	// MAC is the hex HMAC-SHA256, under the operator's audit key, of the
	// line without this field (AuditOptions.Key); AuditLog.Append sets
	// it, always as the line's last field. Empty without a key.
	MAC string `json:"mac,omitempty"`
}

// AuditTimings are the phases of one execution in nanoseconds. The
// container's start is part of create and run.
type AuditTimings struct {
	QueueNs    int64 `json:"queueNs"`
	PrepareNs  int64 `json:"prepareNs"`
	CreateNs   int64 `json:"createNs"`
	RunNs      int64 `json:"runNs"`
	TeardownNs int64 `json:"teardownNs"`
	// BindNs is the part of run that handed the call to its prepared
	// container; Pool is "hit" or "miss" when the warm pool was on.
	BindNs int64  `json:"bindNs,omitempty"`
	Pool   string `json:"pool,omitempty"`
}

// auditRecord builds the record of one execution from its outcome,
// whose secrets secrets.RedactOutcome replaced.
func auditRecord(req *sandbox.Request, callID string, background bool, queue time.Duration, res *sandbox.Result, runErr error) AuditRecord {
	sum := sha256.Sum256([]byte(req.Command))
	rec := AuditRecord{
		Time:          time.Now().UTC(),
		ExecutionID:   req.CallID,
		SessionID:     req.Session.ID,
		CallID:        callID,
		Background:    background,
		Policy:        req.Policy.Name,
		PolicyDigest:  req.Policy.Digest,
		Backend:       string(req.Policy.Backend),
		Runtime:       string(req.Policy.Runtime),
		Image:         req.Policy.Image,
		CommandSHA256: hex.EncodeToString(sum[:]),
		EnvNames:      envNames(req),
		Mounts:        auditMounts(req),
		Timings:       AuditTimings{QueueNs: int64(queue)},
	}
	if runErr != nil {
		rec.Error = types.Body(runErr).Class + ": " + runErr.Error()
	}
	if res != nil {
		if res.Sandbox.Backend != "" {
			rec.Backend, rec.Runtime, rec.Image = res.Sandbox.Backend, res.Sandbox.Runtime, res.Sandbox.Image
		}
		rec.ImageDigest = res.Sandbox.ImageDigest
		rec.ContainerID = res.Sandbox.ContainerID
		rec.Timings.PrepareNs = int64(res.Timings.Prepare)
		rec.Timings.CreateNs = int64(res.Timings.Create)
		rec.Timings.RunNs = int64(res.Timings.Run)
		rec.Timings.TeardownNs = int64(res.Timings.Teardown)
		rec.Timings.BindNs = int64(res.Timings.Bind)
		rec.Timings.Pool = res.Timings.Pool
		rec.ExitCode, rec.Signal = res.ExitCode, res.Signal
		rec.TimedOut, rec.Aborted = res.TimedOut, res.Aborted
		rec.StdoutBytes = int64(len(res.Stdout.Text)) + res.Stdout.DroppedBytes
		rec.StderrBytes = int64(len(res.Stderr.Text)) + res.Stderr.DroppedBytes
		rec.DroppedBytes = res.Stdout.DroppedBytes + res.Stderr.DroppedBytes
		rec.Egress = res.Egress
	}
	return rec
}

// envNames are the names of the ordinary and DSH_* env of req, sorted.
func envNames(req *sandbox.Request) []string {
	names := []string{}
	for _, layer := range [][]string{req.Env, req.DSHEnv} {
		for _, kv := range layer {
			name, _, _ := strings.Cut(kv, "=")
			names = append(names, name)
		}
	}
	for name := range req.Policy.EnvSet {
		names = append(names, name)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// AuditMount is one host path a call was given: a bind of its plan
// (sandbox.PlanMount), every one nosuid and nodev.
type AuditMount struct {
	// Kind says why: "workspace", "transcript", "policy-mount" or
	// "mount-root" (sandbox.MountKind).
	Kind     sandbox.MountKind `json:"kind"`
	Source   string            `json:"source"`
	Target   string            `json:"target"`
	ReadOnly bool              `json:"readOnly"`
	NoExec   bool              `json:"noexec,omitempty"`
}

// auditMounts are the binds of the call's plan, the host paths the
// backend mounted; none when the plan is refused (the call then failed
// before anything was mounted, and the record says why).
func auditMounts(req *sandbox.Request) []AuditMount {
	ms := []AuditMount{}
	plan, err := policy.Plan(req.Policy, req.Session, policy.Identity{})
	if err != nil {
		return ms
	}
	for _, m := range plan.Binds() {
		ms = append(ms, AuditMount{Kind: m.Kind, Source: m.Source, Target: m.Target, ReadOnly: !m.Writable, NoExec: m.NoExec})
	}
	return ms
}
