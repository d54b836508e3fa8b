package sandbox

import (
	"bytes"
	"context"
	"io"
	"time"
)

// Executor runs one command in a fresh, short-lived container.
// Implementations are safe for concurrent use.
type Executor interface {
	// Run executes req in the foreground and returns when the container
	// is gone. A non-nil error means the sandbox itself failed (nothing
	// ran, or the outcome is unknown); its class maps to exit code 125
	// or 2. A command that ran and failed is a Result with a non-zero
	// ExitCode and a nil error.
	Run(ctx context.Context, req *Request) (*Result, error)
}

// Defaults of DESIGN §3.7.
const (
	DefaultTimeout        = 120 * time.Second
	DefaultMaxTimeout     = 600 * time.Second
	DefaultStdoutMaxBytes = 64000
	DefaultSpillMaxBytes  = 64 << 20
	DefaultKillGrace      = 3 * time.Second
	// DefaultSpillTotalBytes and DefaultSpillRetention bound the spill
	// files of one directory (Limits.SpillTotalBytes, SpillRetentionMs).
	DefaultSpillTotalBytes = 256 << 20
	DefaultSpillRetention  = 24 * time.Hour
)

// Request is one call. The zero value is not valid: Command or Argv (not
// both) and Policy are required. A Request must not be modified while a
// call that uses it runs.
type Request struct {
	// Command is run as `bash -c Command` (or `sh -c` where the image has
	// no bash). Empty when Argv is set.
	Command string `json:"command"`
	// Argv, when set, is run exactly as this argument vector, with no
	// shell in between: Argv[0] is looked up in the child's PATH unless
	// it holds a slash. It must have a non-empty first word and no NUL
	// byte, and excludes Command. Nil means run Command.
	Argv []string `json:"argv,omitempty"`
	// Workdir is the absolute working directory inside the container;
	// empty means the session's cwd when the workspace is mounted, else
	// /tmp.
	Workdir string `json:"workdir,omitempty"`
	// TimeoutMs bounds the call; 0 means the policy's timeout (default
	// 120 s); it is clamped to the policy's maximum (default 600 s); a
	// negative value is an invalid-argument error. A background call
	// ignores it.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// Background marks a background job (jobs.Runner.Start sets it): its only
	// deadline is Policy.Limits.JobTimeoutMs, none when that is 0; a job
	// stopped by it is timed out (Result.TimedOut), never completed.
	Background bool `json:"background,omitempty"`
	// StdoutMaxBytes is how many bytes of each stream's tail are kept in
	// the Result; 0 means the policy's value (default 64 000).
	StdoutMaxBytes int `json:"stdoutMaxBytes,omitempty"`
	// Stdin is fed to the command; only trusted in-process callers set it.
	// Nil means an empty stdin.
	Stdin []byte `json:"stdin,omitempty"`
	// StdinReader, when set, is streamed to the command's stdin as it
	// arrives, instead of Stdin, with bounded memory; the command sees EOF
	// when it returns io.EOF. Only the CLI sets it (exec -i), for trusted
	// in-process callers: it is never read from a client's JSON. A Read
	// still blocked when the call ends is left to the caller (the
	// backends stop copying; the CLI exits).
	StdinReader io.Reader `json:"-"`
	// Terminal, when set, runs the command on a pseudo-terminal inside
	// the container (exec -t), fed from StdinSource, its output one
	// stream in Stdout; nil means plain pipes. Only the CLI sets it; it is
	// never read from a client's JSON. A policy with DenyTTY refuses it.
	Terminal *Terminal `json:"-"`
	// Env is ordinary environment (layer 4 of DESIGN §3.6) as KEY=VALUE.
	// DSH_* names are dropped; malformed entries are an error.
	Env []string `json:"env,omitempty"`
	// DSHEnv is the trusted DSH_* snapshot as sorted KEY=VALUE, applied
	// last. Only the service builds it.
	DSHEnv []string `json:"dshEnv,omitempty"`
	// Session describes the agent session the call belongs to; the zero
	// value is a call with no agent.
	Session Session `json:"session"`
	// Policy is the resolved policy that confines the call.
	Policy Policy `json:"policy"`
	// CallID names the call in spill files, labels and logs; empty means
	// the backend makes one up.
	CallID string `json:"callId,omitempty"`
	// Labels are extra labels/annotations for the container.
	Labels map[string]string `json:"labels,omitempty"`

	// Stdout and Stderr, when set, receive the output live as it is
	// produced, in addition to the capture in the Result. Writes must not
	// block for long.
	Stdout io.Writer `json:"-"`
	Stderr io.Writer `json:"-"`
}

// StdinSource is the command's stdin: StdinReader when set, else Stdin;
// nil means an empty stdin.
func (r *Request) StdinSource() io.Reader {
	switch {
	case r.StdinReader != nil:
		return r.StdinReader
	case len(r.Stdin) > 0:
		return bytes.NewReader(r.Stdin)
	}
	return nil
}

// Session is what a backend needs to know about the call's agent session.
// The sandbox layer never reads session stores; callers fill this in.
type Session struct {
	// ID is the session id; empty means a call with no agent.
	ID string `json:"id,omitempty"`
	// Cwd is the session's working directory (the workspace), absolute,
	// mounted at the same path per Policy.Workspace; empty means none.
	Cwd string `json:"cwd,omitempty"`
	// TranscriptDir is the directory holding the session's transcript
	// (the dir of DSH_SESSION_JSONL), mounted read-only at the same path
	// per Policy.Transcript and created 0700 when missing; empty means
	// none. Spill files go to TranscriptDir/spill.
	TranscriptDir string `json:"transcriptDir,omitempty"`
	// Owner is the harness user, who owns the session directory: the
	// service fills it from the client's peer credentials (SO_PEERCRED),
	// or with its own uid for a token client; the CLI with its real
	// uid:gid. prepare.Paths gives the session directory, its spill/
	// subdirectory and the spill files to this user (mode 0700/0600)
	// and lets the call's identity read them through a POSIX ACL entry
	// (hostpath.MakeSessionDir says how existing directories are treated).
	// The zero value (Set false) means the running process's own
	// effective uid:gid. It is never read from a client's JSON.
	Owner Owner `json:"-"`
}

// Owner is a host user and group that owns files; Set false means none
// was given. It is a plain value, safe to copy.
type Owner struct {
	UID, GID uint32
	Set      bool
}

// Policy is a resolved sandbox policy in machine units, as the policy
// package produces it from a file or a built-in profile. The zero value
// is not valid.
type Policy struct {
	// Name is the policy's name; Digest the sha256 of its normalized form.
	Name   string `json:"name"`
	Digest string `json:"digest,omitempty"`
	// Backend names the backend of the program's registry that runs the
	// policy's calls: "oci", "docker", "containerd", "local",
	// "kubernetes".
	Backend Backend `json:"backend"`
	// Runtime is "runc", "crun" or "runsc" (Runtimes) for OCI-speaking
	// backends.
	Runtime Runtime `json:"runtime,omitempty"`
	// Image is "host", a local image name the backend has, or an image
	// reference a registry has ("repository:tag" or
	// "repository@sha256:…", pulled per Pull).
	Image string `json:"image"`
	// Pull says when a backend with a local image store pulls Image
	// from its registry: PullNever, PullMissing (also "", the default)
	// or PullAlways (PullModes).
	Pull PullMode `json:"pull,omitempty"`
	// VerifyKeys are absolute paths of PEM public keys (policy
	// verify.keys); when set, Image must carry a cosign-compatible
	// signature by one of them, verified when it is pulled, or the call
	// is refused before anything runs. Nil asks for none.
	VerifyKeys []string `json:"verifyKeys,omitempty"`
	// User is "auto", "host-root" or "uid:gid".
	User User `json:"user"`
	// Network is "none" or "loopback", which both have only the lo
	// interface, or "allowlist": only lo too, plus an egress proxy and a
	// DNS server on it that reach the hosts of NetworkAllow (package
	// egress).
	Network NetworkMode `json:"network"`
	// NetworkAllow and NetworkDeny are the host rules of network
	// "allowlist" (egress.ParseRules); nil for the other networks.
	NetworkAllow []string `json:"networkAllow,omitempty"`
	NetworkDeny  []string `json:"networkDeny,omitempty"`
	// Credentials are secrets the egress proxy of network "allowlist"
	// adds to HTTPS requests to their hosts (policy
	// network.credentials); nil means none.
	Credentials []Credential `json:"credentials,omitempty"`
	// Workspace is "rw", "ro" or "none" for the session cwd mount.
	Workspace WorkspaceMode `json:"workspace"`
	// Transcript is "ro" or "none" for the session directory mount.
	Transcript TranscriptMode `json:"transcript"`
	// Mounts are extra bind mounts.
	Mounts []Mount `json:"mounts,omitempty"`
	// MountRoots are the host directories below which a caller may add
	// bind mounts to one call (policy.Narrow: exec --mount, the API's
	// mounts); nil allows none.
	MountRoots []MountRoot `json:"mountRoots,omitempty"`
	// Tmpfs are tmpfs mounts; /tmp is always present.
	Tmpfs []Tmpfs `json:"tmpfs,omitempty"`
	// Limits are resource limits and output bounds.
	Limits Limits `json:"limits"`
	// EnvInherit names variables copied from the service's environment
	// (after the secret and LD_* filters).
	EnvInherit []string `json:"envInherit,omitempty"`
	// EnvAllowSecrets names variables of EnvInherit that are copied even
	// though their name or value looks like a secret (policy
	// env.allowSecrets; see childenv.Input.AllowSecrets). Nil allows none.
	EnvAllowSecrets []string `json:"envAllowSecrets,omitempty"`
	// EnvSet is ordinary env the policy sets (layer 4).
	EnvSet map[string]string `json:"envSet,omitempty"`
	// RedactEnv names variables of the service's environment whose
	// values are redacted from the call's output, besides those the
	// secret filter withholds (policy redact.env; see secrets.Of). Nil
	// adds none.
	RedactEnv []string `json:"redactEnv,omitempty"`
	// RedactFiles are absolute host paths of files whose contents are
	// secrets to redact, read at call start (policy redact.files; see
	// secrets.Of). Nil adds none.
	RedactFiles []string `json:"redactFiles,omitempty"`
	// RedactDetectors also redacts the base64 forms of every secret and
	// what the program's pattern detector finds (policy
	// redact.detectors; driver.Service.Detector). False redacts the
	// values as they are.
	RedactDetectors bool `json:"redactDetectors,omitempty"`
	// DenyTTY refuses calls that ask for a terminal (Request.Terminal;
	// policy file tty: false). The zero value allows them.
	DenyTTY bool `json:"denyTty,omitempty"`
}

// Credential is a secret the egress proxy adds to a call's HTTPS
// requests to one host, so that the call never holds it: the call's
// Variable holds a placeholder, unique per call. The value is read at
// call time from the service's environment (ValueEnv) or an
// operator-owned file (ValueFile), exactly one of them; never from a
// request or the workspace.
type Credential struct {
	// Name names the credential in the record and the audit log.
	Name string `json:"name"`
	// Host is the host name the credential is bound to, and Port its
	// port (0 means 443).
	Host string `json:"host"`
	Port uint16 `json:"port,omitempty"`
	// Header is the request header that carries it ("Authorization"),
	// Format its value with {} for the secret ("Bearer {}").
	Header string `json:"header"`
	Format string `json:"format"`
	// Variable is the call's variable that holds the placeholder
	// ("GITHUB_TOKEN"); empty means none.
	Variable string `json:"variable,omitempty"`
	// ValueEnv names the service's variable holding the secret;
	// ValueFile is the absolute path of an operator-owned file holding
	// it (surrounding white space trimmed).
	ValueEnv  string `json:"valueEnv,omitempty"`
	ValueFile string `json:"valueFile,omitempty"`
	// UpstreamCAFile is an operator-owned PEM file of the CAs that
	// verify Host's certificate; empty means the host's trust store.
	UpstreamCAFile string `json:"upstreamCAFile,omitempty"`
}

// Mount is a bind mount from the host.
type Mount struct {
	Source   string `json:"source"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"readOnly"`
	// FromRoot is true for a mount one call added below the policy's
	// MountRoots (policy.Narrow sets it); a policy file's mounts never
	// have it. It only names the mount's kind in the call's Plan
	// (MountRequested). It is in no JSON encoding: a client cannot set
	// it, and a policy's digest and wire form do not change with it.
	FromRoot bool `json:"-"`
}

// MountRoot is a host directory below which a call may ask for a bind
// mount: read-only only when ReadOnly, else read-only or read-write.
type MountRoot struct {
	Path     string `json:"path"`
	ReadOnly bool   `json:"readOnly"`
}

// Tmpfs is a tmpfs mount. SizeBytes 0 means the runtime's default.
type Tmpfs struct {
	Target    string `json:"target"`
	SizeBytes int64  `json:"sizeBytes,omitempty"`
}

// Limits bound one call. Zero values mean the documented default.
type Limits struct {
	// MemoryBytes is the memory limit (swap included); 0 = 1 GiB.
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// CPUs is the CPU quota in cores; 0 = 1.0.
	CPUs float64 `json:"cpus,omitempty"`
	// Pids is the maximum number of tasks; 0 = 256.
	Pids int64 `json:"pids,omitempty"`
	// TimeoutMs is the default call timeout; 0 = 120 000.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// MaxTimeoutMs clamps a requested timeout; 0 = 600 000.
	MaxTimeoutMs int64 `json:"maxTimeoutMs,omitempty"`
	// JobTimeoutMs is the deadline of a background job (Request.Background);
	// 0 = none, like dsh's own jobs (DESIGN §3.7). The foreground
	// timeouts above never apply to a job.
	JobTimeoutMs int64 `json:"jobTimeoutMs,omitempty"`
	// StdoutMaxBytes is the tail kept per stream; 0 = 64 000.
	StdoutMaxBytes int `json:"stdoutMaxBytes,omitempty"`
	// SpillMaxBytes caps each spill file; 0 = 64 MiB.
	SpillMaxBytes int64 `json:"spillMaxBytes,omitempty"`
	// SpillTotalBytes caps the spill files of one session directory (or
	// of the state directory, for calls without one) together; 0 =
	// DefaultSpillTotalBytes (256 MiB). The oldest files are removed
	// before a call starts; a call's spill stops when the total would
	// pass the cap.
	SpillTotalBytes int64 `json:"spillTotalBytes,omitempty"`
	// SpillRetentionMs is how long spill files are kept: older ones are
	// removed when a call of the same directory starts; 0 =
	// DefaultSpillRetention (24 h).
	SpillRetentionMs int64 `json:"spillRetentionMs,omitempty"`
	// WorkspaceBytes bounds the bytes the workspace tree holds in all
	// (what is there already included), with the file system's project
	// quotas (sandbox/quota); 0 = no bound. A call of a policy that sets
	// it and mounts the workspace read-write is refused where the
	// workspace's file system cannot enforce it.
	WorkspaceBytes int64 `json:"workspaceBytes,omitempty"`
}

// Result is the outcome of a call that ran.
type Result struct {
	// ExitCode is the command's exit status; nil when it was killed by a
	// signal (including on timeout or abort).
	ExitCode *int `json:"exitCode"`
	// Signal names the signal that killed the command ("SIGKILL"), if any.
	Signal string `json:"signal,omitempty"`
	// TimedOut is true when the call hit its timeout.
	TimedOut bool `json:"timedOut"`
	// Aborted is true when the caller cancelled the call; never together
	// with TimedOut.
	Aborted bool `json:"aborted"`
	// OOMKilled is true when the kernel's out-of-memory killer killed a
	// process of the call because it reached its memory limit (the
	// command itself, or any process it started). Backends without a
	// memory limit of their own (local) always report false.
	OOMKilled bool `json:"oomKilled"`
	// TimeoutMs is the timeout that applied.
	TimeoutMs int64  `json:"timeoutMs"`
	Stdout    Stream `json:"stdout"`
	Stderr    Stream `json:"stderr"`
	// Sandbox says where the call ran.
	Sandbox Info `json:"sandbox"`
	// Timings are the phases of the call.
	Timings Timings `json:"timings"`
	// Egress lists the connections the call's egress proxy allowed or
	// refused, in the order they ended (network "allowlist" only).
	Egress []Connection `json:"egress,omitempty"`
}

// Connection is one connection a call asked its egress proxy for.
type Connection struct {
	// Host and Port are what the call asked for: a name or an IP literal.
	Host string `json:"host"`
	Port uint16 `json:"port"`
	// Address is the address the proxy dialed; empty when refused.
	Address string `json:"address,omitempty"`
	// Verdict is "allowed", "denied", "failed" (allowed, but its
	// upstream could not be reached) or "dropped" (the record's last entry when
	// the call made more connections than are recorded; Reason counts
	// them); Reason says which rule decided.
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	// BytesUp were sent by the call, BytesDown received by it.
	BytesUp   int64 `json:"bytesUp"`
	BytesDown int64 `json:"bytesDown"`
}

// Stream is one captured output stream.
type Stream struct {
	// Text is the kept tail of the stream (at most StdoutMaxBytes bytes).
	Text string `json:"text"`
	// Truncated is true when bytes were dropped from the head.
	Truncated bool `json:"truncated"`
	// SpillPath is the file holding the full output (up to the spill
	// cap), set when Truncated.
	SpillPath string `json:"spillPath,omitempty"`
	// SpillInside is true when SpillPath is visible inside later calls of
	// the session (it lies in the read-only session directory).
	SpillInside bool `json:"spillInside,omitempty"`
	// DroppedBytes is exactly how many bytes are not in Text.
	DroppedBytes int64 `json:"droppedBytes"`
}

// Info says where a call ran.
type Info struct {
	Backend string `json:"backend"`
	Runtime string `json:"runtime,omitempty"`
	Image   string `json:"image"`
	// ImageDigest is the digest of the image the call ran (the manifest
	// digest of a pulled or imported image, as images list shows it);
	// empty for the host image and backends that do not know it.
	ImageDigest string `json:"imageDigest,omitempty"`
	Policy      string `json:"policy"`
	ContainerID string `json:"containerId"`
}

// Timings are the phases of one call.
type Timings struct {
	Prepare  time.Duration `json:"prepareNs"`
	Create   time.Duration `json:"createNs"`
	Run      time.Duration `json:"runNs"`
	Teardown time.Duration `json:"teardownNs"`
	// Bind is the part of Run that handed the call to its prepared
	// container (command line, environment, stdio), up to the command's
	// start.
	Bind time.Duration `json:"bindNs,omitempty"`
	// Pool says whether the call's container came from the warm pool:
	// PoolHit, PoolMiss (a pool was on but had no fitting slot: the call
	// prepared its own), or "" when no pool was on.
	Pool string `json:"pool,omitempty"`
}

// Values of Timings.Pool.
const (
	PoolHit  = "hit"
	PoolMiss = "miss"
)
