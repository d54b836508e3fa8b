package prepare

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/redact"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/childenv"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/hostpath"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/secrets"
)

// MaxTailBytes bounds Request.StdoutMaxBytes and Limits.StdoutMaxBytes:
// the tail of each stream is held in memory.
const MaxTailBytes = 16 << 20

// maxSpillRetentionMs bounds Limits.SpillRetentionMs (a year), so that
// the duration cannot overflow.
const maxSpillRetentionMs = 366 * 24 * 3600 * 1000

// maxCallIDLen is the bound of sandbox.ValidCallID, named in errors.
const maxCallIDLen = 64

// Call validates req and resolves it against req.Policy, the image's
// base env and the service's environment (getenv, used only for
// Policy.EnvInherit and Policy.RedactEnv; nil means empty). It does no
// I/O apart from reading random bytes for a call id and the files of
// Policy.RedactFiles, and is safe for concurrent use. The Call's Redact holds
// the secrets of secrets.Redactor over the process's environment (os.Environ)
// and, under Policy.RedactDetectors, the pattern detector d (the
// program's; nil means none, and then such a policy is refused with
// secrets.CheckDetector's error, which wraps ErrUnavailable).
//
// Other errors wrap ErrInvalid and name the offending field: an empty command
// (without argv) or one with a NUL byte; an argv set together with a
// command, with an empty first word or with a NUL byte; a policy without a backend; a negative timeout,
// tail size or policy limit, or a tail size above MaxTailBytes; a
// relative workdir, session cwd or transcript directory; a call id that
// is not a safe name; a malformed Env, Policy.EnvSet or image env entry;
// a DSHEnv entry outside DSH_ or set twice; a Policy.RedactFiles file
// that cannot be read safely (secrets.Redactor).
//
// Resolution: the timeout is TimeoutMs, else Policy.Limits.TimeoutMs,
// else sandbox.DefaultTimeout, clamped to Policy.Limits.MaxTimeoutMs (default
// sandbox.DefaultMaxTimeout); for a Background call it is
// Policy.Limits.JobTimeoutMs, 0 meaning none; the tail size is StdoutMaxBytes, else the policy's,
// else sandbox.DefaultStdoutMaxBytes; the workdir is Workdir, else the plan's
// (sandbox.NewPlan: Session.Cwd when the workspace is mounted, else /tmp), and
// the spill directory and its visibility are the plan's. The env is
// childenv.Build of imageEnv; Policy.EnvInherit; Policy.EnvSet (sorted) then
// Env as the ordinary layer; DSHEnv as the snapshot. DSH_* names in Env
// and Policy.EnvSet are dropped, as the Request documents, not rejected.
func Call(req *sandbox.Request, imageEnv []string, getenv func(string) (string, bool), d redact.Detector) (*sandbox.Call, error) {
	if req == nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "sandbox: request is nil")
	}
	if err := checkRequest(req); err != nil {
		return nil, err
	}
	lim := req.Policy.Limits

	c := &sandbox.Call{ID: req.CallID}
	if c.ID == "" {
		c.ID = NewCallID()
	}

	defMs, maxMs := lim.TimeoutMs, lim.MaxTimeoutMs
	if defMs == 0 {
		defMs = sandbox.DefaultTimeout.Milliseconds()
	}
	if maxMs == 0 {
		maxMs = sandbox.DefaultMaxTimeout.Milliseconds()
	}
	ms := req.TimeoutMs
	if ms == 0 {
		ms = defMs
	}
	c.Timeout = time.Duration(min(ms, maxMs)) * time.Millisecond
	if req.Background {
		c.Timeout = time.Duration(lim.JobTimeoutMs) * time.Millisecond // 0: none
	}

	c.TailBytes = cmp.Or(req.StdoutMaxBytes, lim.StdoutMaxBytes, sandbox.DefaultStdoutMaxBytes)
	c.SpillMax = cmp.Or(lim.SpillMaxBytes, sandbox.DefaultSpillMaxBytes)
	c.SpillTotal = cmp.Or(lim.SpillTotalBytes, sandbox.DefaultSpillTotalBytes)
	c.SpillRetention = cmp.Or(time.Duration(lim.SpillRetentionMs)*time.Millisecond, sandbox.DefaultSpillRetention)

	plan := sandbox.NewPlan(req.Policy, req.Session, sandbox.Identity{})
	c.Workdir = plan.Workdir
	if req.Workdir != "" {
		c.Workdir = filepath.Clean(req.Workdir)
	}
	c.SpillDir, c.SpillInside = plan.SpillDir, plan.SpillInside

	ordinary := make([]string, 0, len(req.Policy.EnvSet)+len(req.Env))
	for _, k := range slices.Sorted(maps.Keys(req.Policy.EnvSet)) {
		ordinary = append(ordinary, k+"="+req.Policy.EnvSet[k])
	}
	ordinary = append(ordinary, req.Env...)
	env, err := childenv.Build(childenv.Input{
		Base:         imageEnv,
		Inherit:      req.Policy.EnvInherit,
		AllowSecrets: req.Policy.EnvAllowSecrets,
		Getenv:       getenv,
		Ordinary:     ordinary,
		Snapshot:     req.DSHEnv,
	})
	if err != nil {
		return nil, err
	}
	c.Env = env
	if c.Redact, err = secrets.Redactor(req.Policy, os.Environ(), getenv, d); err != nil {
		return nil, err
	}
	return c, nil
}

// Validate checks req the way Call does, without resolving it: a
// backend calls it before asking a daemon or an image store anything, so
// that a malformed request is refused at once (sandbox/driver). Errors
// are Call's and wrap ErrInvalid.
func Validate(req *sandbox.Request) error {
	if req == nil {
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: request is nil")
	}
	return checkRequest(req)
}

// checkRequest validates the fields of req that Call relies on, naming
// the first bad one. The validators run in a fixed order, so that a
// request with several problems is always refused for the same one.
func checkRequest(req *sandbox.Request) error {
	for _, check := range [...]func(*sandbox.Request) error{
		checkCommand,
		checkBackend,
		checkTimeouts,
		checkOutputLimits,
		checkIDs,
		checkTerminal,
		checkPaths,
		checkEnv,
	} {
		if err := check(req); err != nil {
			return err
		}
	}
	return nil
}

// checkCommand validates what the call runs: Argv (checkArgv), else a
// non-empty Command; Command carries no NUL byte.
func checkCommand(req *sandbox.Request) error {
	if req.Argv != nil {
		if err := checkArgv(req); err != nil {
			return err
		}
	}
	switch {
	case req.Argv == nil && strings.TrimSpace(req.Command) == "":
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: command is empty")
	case strings.IndexByte(req.Command, 0) >= 0:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: command contains a NUL byte")
	}
	return nil
}

// checkBackend refuses a request whose policy names no backend: it was
// never resolved against a policy.
func checkBackend(req *sandbox.Request) error {
	if req.Policy.Backend == "" {
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: policy.backend is empty (the request has no resolved policy)")
	}
	return nil
}

// checkTimeouts refuses a negative timeout of the request or of the
// policy's limits.
func checkTimeouts(req *sandbox.Request) error {
	lim := req.Policy.Limits
	switch {
	case req.TimeoutMs < 0:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: timeoutMs %d is negative", req.TimeoutMs)
	case lim.TimeoutMs < 0:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: policy.limits.timeoutMs %d is negative", lim.TimeoutMs)
	case lim.MaxTimeoutMs < 0:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: policy.limits.maxTimeoutMs %d is negative", lim.MaxTimeoutMs)
	case lim.JobTimeoutMs < 0:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: policy.limits.jobTimeoutMs %d is negative", lim.JobTimeoutMs)
	}
	return nil
}

// checkOutputLimits refuses a tail size of the request or the policy
// outside [0, MaxTailBytes], a negative spill size and a spill retention
// outside [0, maxSpillRetentionMs].
func checkOutputLimits(req *sandbox.Request) error {
	lim := req.Policy.Limits
	switch {
	case req.StdoutMaxBytes < 0 || req.StdoutMaxBytes > MaxTailBytes:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: stdoutMaxBytes %d is outside [0, %d]", req.StdoutMaxBytes, MaxTailBytes)
	case lim.StdoutMaxBytes < 0 || lim.StdoutMaxBytes > MaxTailBytes:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: policy.limits.stdoutMaxBytes %d is outside [0, %d]", lim.StdoutMaxBytes, MaxTailBytes)
	case lim.SpillMaxBytes < 0:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: policy.limits.spillMaxBytes %d is negative", lim.SpillMaxBytes)
	case lim.SpillTotalBytes < 0:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: policy.limits.spillTotalBytes %d is negative", lim.SpillTotalBytes)
	case lim.SpillRetentionMs < 0 || lim.SpillRetentionMs > maxSpillRetentionMs:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: policy.limits.spillRetentionMs %d is outside [0, %d]", lim.SpillRetentionMs, int64(maxSpillRetentionMs))
	}
	return nil
}

// checkIDs refuses a call id that is not a safe name (sandbox.ValidCallID) and a
// session id with a NUL byte.
func checkIDs(req *sandbox.Request) error {
	switch {
	case req.CallID != "" && !sandbox.ValidCallID(req.CallID):
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: callId %q is not 1–%d characters of [A-Za-z0-9_.-] beginning with a letter or digit", req.CallID, maxCallIDLen)
	case strings.IndexByte(req.Session.ID, 0) >= 0:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: session.id %q contains a NUL byte", req.Session.ID)
	}
	return nil
}

// checkTerminal refuses a terminal that the policy forbids.
func checkTerminal(req *sandbox.Request) error {
	if req.Terminal != nil && req.Policy.DenyTTY {
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: policy %q forbids a terminal (tty: false): run without -t", req.Policy.Name)
	}
	return nil
}

// checkPaths refuses a workdir, session cwd or transcript directory that
// is set but relative or carries a NUL byte, and a workdir in /proc.
func checkPaths(req *sandbox.Request) error {
	for _, p := range [...]struct{ field, path string }{
		{"workdir", req.Workdir},
		{"session.cwd", req.Session.Cwd},
		{"session.transcriptDir", req.Session.TranscriptDir},
	} {
		if p.path == "" {
			continue
		}
		if strings.IndexByte(p.path, 0) >= 0 {
			return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q contains a NUL byte", p.field, p.path)
		}
		if !filepath.IsAbs(p.path) {
			return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q is not an absolute path", p.field, p.path)
		}
	}
	if w := filepath.Clean(req.Workdir); req.Workdir != "" && (w == "/proc" || strings.HasPrefix(w, "/proc/")) {
		// A directory descriptor's /proc/self/fd/N as the working
		// directory is how CVE-2024-21626 left the container.
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: workdir %q lies in /proc; choose a directory of the call's own file system", req.Workdir)
	}
	return nil
}

// checkEnv refuses a malformed Policy.EnvSet or Env entry, and a DSHEnv
// entry that is malformed, outside DSH_ or set twice.
func checkEnv(req *sandbox.Request) error {
	for k, v := range req.Policy.EnvSet {
		if err := childenv.CheckName("policy.envSet", k); err != nil {
			return err
		}
		if strings.IndexByte(v, 0) >= 0 {
			return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: policy.envSet: value of %q contains a NUL byte", k)
		}
	}
	if err := childenv.CheckEntries("env", req.Env, false); err != nil {
		return err
	}
	seen := make(map[string]bool, len(req.DSHEnv))
	for i, e := range req.DSHEnv {
		name, _, _ := strings.Cut(e, "=")
		if seen[name] {
			return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: dshEnv[%d]: %q is set twice", i, name)
		}
		seen[name] = true
	}
	return childenv.CheckEntries("dshEnv", req.DSHEnv, true)
}

// checkArgv validates Request.Argv: set without Command, a non-empty
// first word, no NUL byte in any argument.
func checkArgv(req *sandbox.Request) error {
	switch {
	case req.Command != "":
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: command and argv are both set; give one of them")
	case len(req.Argv) == 0 || req.Argv[0] == "":
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: argv[0] is empty")
	}
	for i, a := range req.Argv {
		if strings.IndexByte(a, 0) >= 0 {
			return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: argv[%d] contains a NUL byte", i)
		}
	}
	return nil
}

// NewCallID returns a random call id, "call-" and 24 hex digits. It is
// safe for concurrent use.
func NewCallID() string { return "call-" + randomHex(12) }

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails; see crypto/rand.Read
	return hex.EncodeToString(b)
}

// Paths resolves and checks every host path call mounts or
// writes, and creates the session directory; backends call it after
// Call and as late as they can before the runtime is given the
// mounts (it is the check closest to the mount). It fills
// call.Workspace and call.TranscriptDir. Errors wrap ErrInvalid and name
// the field:
//
//   - session.cwd, when the policy mounts the workspace ("rw" or "ro"):
//     it must exist, be a directory with no symbolic link in any
//     component (hostpath.ResolveDir) and not be a system directory (hostpath.SystemDir);
//   - workdir, when it lies in the mounted workspace (or always, for the
//     local backend, which runs in it on the host): no symbolic link in
//     any existing component; the local backend needs it to exist;
//   - session.transcriptDir: not a system directory, not inside a
//     mounted workspace, read-write or read-only (nor containing it):
//     the call would see, or forge, other sessions' transcripts; it and its
//     spill/ subdirectory are created 0700 without following links and
//     belong to the harness user (req.Session.Owner), and the call's
//     identity callUID (from policy.ResolveUser; the service's own uid for
//     the local backend) may read them through an ACL entry when the
//     policy mounts the transcript (hostpath.MakeSessionDir, which also refuses a
//     directory a third user owns); a link anywhere in the chain is refused;
//   - policy.limits.workspaceBytes, when set and the workspace is
//     mounted read-write: the workspace is bounded with a btrfs qgroup
//     limit or a project quota (quota.Limit); a workspace where neither
//     can be enforced refuses the call (ErrUnavailable);
//   - policy.mounts[i].source: no symbolic link in any component
//     (hostpath.ResolvePath); a read-write mount of a system directory is refused.
//
// What remains is a race: a component swapped for a link between this
// check and the runtime's mount, since every runtime (runc, crun, runsc,
// dockerd, containerd) takes a mount source as a path, not a
// descriptor. Backends call Paths as late as their structure
// allows (right before the spec or container is created; capture.ForCall then
// re-opens the session's spill directory without following links right
// before the start and disables the spill if it changed). Swapping a
// component needs write access to its parent: the workspace's own
// components lie at or above the workspace root, which no call of that
// workspace can write, so the race is open only to a concurrent call of
// another session whose writable workspace contains this one (nested
// workspaces), or to a host user who owns the parents anyway. The
// session directory's parents lie in the sessions root, which no call
// can write once hostpath.CheckDeployment keeps it out of every workspace.
func Paths(req *sandbox.Request, call *sandbox.Call, callUID uint32) error {
	if req == nil || call == nil {
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: Paths: request or call is nil")
	}
	plan := sandbox.NewPlan(req.Policy, req.Session, sandbox.Identity{UID: callUID})
	_, mounted := plan.Mount(sandbox.MountWorkspace)
	if mounted {
		if err := prepareWorkspace(req, plan, call); err != nil {
			return err
		}
	}
	if err := checkWorkdir(req, call, mounted); err != nil {
		return err
	}
	if err := checkMountSources(req.Policy.Mounts); err != nil {
		return err
	}
	if len(plan.Dirs) == 0 {
		return nil
	}
	// The plan's directories are the session directory and its spill/
	// subdirectory, which hostpath.MakeSessionDir creates together.
	return prepareSessionDir(plan.Dirs[0], call, mounted)
}

// prepareWorkspace resolves and checks the mounted workspace (the
// session cwd), sets call.Workspace and bounds the workspace's size
// when the policy asks for it (limitWorkspace).
func prepareWorkspace(req *sandbox.Request, plan sandbox.Plan, call *sandbox.Call) error {
	ws, err := hostpath.ResolveDir("session.cwd", req.Session.Cwd)
	if err != nil {
		return err
	}
	if hostpath.SystemDir(ws) {
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: session.cwd %q is a system directory and may not be a workspace", ws)
	}
	call.Workspace = ws
	return limitWorkspace(req.Policy, plan, ws)
}

// checkWorkdir refuses a workdir with a symbolic link in an existing
// component when it lies in the mounted workspace, and always for the
// local backend, which also needs it to exist.
func checkWorkdir(req *sandbox.Request, call *sandbox.Call, mounted bool) error {
	local := req.Policy.Backend == sandbox.BackendLocal
	if req.Workdir != "" && (local || (mounted && hostpath.Within(call.Workdir, call.Workspace))) {
		if _, err := hostpath.ResolveDir("workdir", req.Workdir); err != nil && (local || !errors.Is(err, fs.ErrNotExist)) {
			return err
		}
	}
	return nil
}

// checkMountSources refuses a policy mount whose source has a symbolic
// link in any component, one that is neither a directory nor a regular
// file (a socket, FIFO or device: the backends' stager binds neither),
// and a read-write mount of a system directory.
func checkMountSources(mounts []sandbox.Mount) error {
	for i, m := range mounts {
		field := fmt.Sprintf("policy.mounts[%d].source", i)
		src, err := hostpath.ResolvePath(field, m.Source)
		if err != nil {
			return err
		}
		fi, err := os.Lstat(src)
		if err != nil {
			return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q: %v", field, src, err)
		}
		if t := fi.Mode().Type(); t != 0 && t != fs.ModeDir {
			return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q is neither a directory nor a regular file (%v): only those can be mounted", field, src, t)
		}
		if !m.ReadOnly && hostpath.SystemDir(src) {
			return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s %q is a system directory and may not be mounted read-write", field, src)
		}
	}
	return nil
}

// prepareSessionDir checks the session directory dir (not a system
// directory, apart from a mounted workspace), creates it with its spill/
// subdirectory (hostpath.MakeSessionDir) and fills call.TranscriptDir and, when
// the call's spill files go there, call.SpillOwner and call.SpillReader.
func prepareSessionDir(dir sandbox.PlanDir, call *sandbox.Call, mounted bool) error {
	td := dir.Path
	if hostpath.SystemDir(td) {
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: session.transcriptDir %q is a system directory", td)
	}
	if mounted {
		if err := hostpath.CheckDeployment(call.Workspace, map[string]string{"session.transcriptDir": td}); err != nil {
			return err
		}
	}
	reader := dir.Reader
	owner, err := hostpath.MakeSessionDir(td, dir.Owner, reader)
	if err != nil {
		return err
	}
	if reader.UID == owner.UID {
		reader = sandbox.Owner{}
	}
	call.TranscriptDir = td
	if call.SpillDir != "" && hostpath.Within(call.SpillDir, td) {
		call.SpillOwner, call.SpillReader = owner, reader
	}
	return nil
}
