package api

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
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
	Client        string   `json:"client,omitempty"`
	CallID        string   `json:"callId,omitempty"`
	Background    bool     `json:"background,omitempty"`
	Policy        string   `json:"policy"`
	PolicyDigest  string   `json:"policyDigest,omitempty"`
	Backend       string   `json:"backend"`
	Runtime       string   `json:"runtime,omitempty"`
	Image         string   `json:"image"`
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

// AuditLog appends hash-chained records to a JSONL file. Create it with
// OpenAudit; it is safe for concurrent use. Each record is one write(2) of
// a whole line with O_APPEND, so a crash leaves at most a torn last line,
// which the next OpenAudit cuts off.
type AuditLog struct {
	mu   sync.Mutex
	path string
	f    *os.File
	prev string
}

// OpenAudit opens (creating 0600) the audit log at path, verifies the
// chain it already holds and continues it. A torn final line (no newline)
// is removed first; a broken chain is an error.
func OpenAudit(path string) (*AuditLog, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i+1 != len(data) {
		data = data[:i+1]
		if err := f.Truncate(int64(len(data))); err != nil {
			f.Close()
			return nil, fmt.Errorf("audit log %s: cutting a torn last line: %w", path, err)
		}
	}
	_, head, err := VerifyAudit(bytes.NewReader(data))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	if _, err := f.Seek(0, io.SeekEnd); err != nil {
		f.Close()
		return nil, err
	}
	return &AuditLog{path: path, f: f, prev: head}, nil
}

// Reopen opens the log's path again, for log rotation: after the file was
// renamed, records go to a new file at the path, whose chain starts again
// at GenesisHash (each file verifies on its own); when the path is still
// the same file, its chain continues. It returns the head hash of the file
// written so far, to link the two chains. On error the old file stays in
// use.
func (a *AuditLog) Reopen() (previousHead string, err error) {
	a.mu.Lock() // appends wait: the new file must see every record
	defer a.mu.Unlock()
	next, err := OpenAudit(a.path)
	if err != nil {
		return "", err
	}
	old, head := a.f, a.prev
	a.f, a.prev = next.f, next.prev
	_ = old.Sync()
	return head, old.Close()
}

// Append writes rec with Prev set to the chain's head.
func (a *AuditLog) Append(rec AuditRecord) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	rec.Prev = a.prev
	line, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("audit record: %w", err)
	}
	if _, err := a.f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	a.prev = lineHash(line)
	return nil
}

// Close closes the file after syncing it.
func (a *AuditLog) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	_ = a.f.Sync()
	return a.f.Close()
}

func lineHash(line []byte) string {
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:])
}

// VerifyAudit checks the hash chain of an audit log: every line is a JSON
// record whose prev is the sha256 of the line before it (GenesisHash for
// the first). It returns the number of records and the head hash (the
// sha256 of the last line, GenesisHash for an empty log), or an error
// naming the first line that breaks the chain — an edited, removed or
// reordered line breaks it at the line after the change. Appending forged
// records or editing the last line can only be detected by comparing the
// head hash with one kept elsewhere.
func VerifyAudit(r io.Reader) (records int, head string, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxAuditLine)
	head = GenesisHash
	for sc.Scan() {
		records++
		line := sc.Bytes()
		var rec struct {
			Prev *string `json:"prev"`
		}
		if err := json.Unmarshal(line, &rec); err != nil {
			return records - 1, head, fmt.Errorf("line %d: not a JSON record: %v", records, err)
		}
		if rec.Prev == nil {
			return records - 1, head, fmt.Errorf("line %d: no prev hash", records)
		}
		if *rec.Prev != head {
			return records - 1, head, fmt.Errorf("line %d: prev %q does not match the sha256 of line %d (%s): a line was edited, removed or reordered", records, *rec.Prev, records-1, head)
		}
		head = lineHash(line)
	}
	if err := sc.Err(); err != nil {
		return records, head, fmt.Errorf("line %d: %w", records+1, err)
	}
	return records, head, nil
}

// auditRecord builds the record of one execution from its outcome,
// whose secrets sandbox.RedactOutcome replaced.
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
