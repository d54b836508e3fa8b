package policy

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/redact"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Explain describes in plain English, one fact per line, what a call under
// p may read, write and reach, which user it runs as, its privileges,
// limits and environment — the text `dsh-sandbox policy check` prints.
// Environment values are never shown, only names. p is normalized first;
// an invalid policy is explained as the single line saying why.
func Explain(p sandbox.Policy) string {
	p, err := Normalize(p)
	if err != nil {
		return err.Error() + "\n"
	}
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	l := p.Limits

	line("policy %s (%s)", p.Name, p.Digest)
	if p.Backend == sandbox.BackendLocal {
		line("WARNING: backend local runs every command directly on the host, with no container: it can read, write and reach whatever the service's own user can. Use it only for trusted development.")
		line("backend: local (no container); image, user, network, mounts and cgroup limits do not apply")
	} else {
		runtime := "runtime " + p.Runtime
		if p.Runtime == sandbox.RuntimeRunsc {
			runtime += " (gVisor: system calls are served by a user-space kernel)"
		}
		line("backend: %s with %s, image %s; one fresh container per call, removed when the call ends", p.Backend, runtime, p.Image)
		explainImage(p, line)
		explainUser(p.User, line)
		line("privileges: no capabilities (all five sets empty), no-new-privileges, Docker's default seccomp profile (other system calls fail with EPERM)")
		line("isolation: own pid, mount, ipc, uts, network and cgroup namespaces (the host's cgroup paths are not visible); /proc/kcore, /proc/keys, /proc/cmdline, /sys/kernel/vmcoreinfo and other sensitive /proc and /sys paths masked, /proc/sys read-only")
		explainNetwork(p, line)
		explainFiles(p, line)
		line("devices: only /dev/null, zero, full, random, urandom and tty")
		line("limits: memory %s (swap included), cpus %s, tasks %d, open files %d (hard %d), no core dumps",
			formatSize(l.MemoryBytes), strconv.FormatFloat(l.CPUs, 'f', -1, 64), l.Pids, NofileSoft, NofileHard)
	}
	line("time: %d ms per call by default, at most %d ms when the caller asks for more; on timeout SIGTERM, then SIGKILL %s later",
		l.TimeoutMs, l.MaxTimeoutMs, sandbox.DefaultKillGrace)
	if l.JobTimeoutMs > 0 {
		line("background jobs: stopped after %d ms (reported as timed out); at most the service's per-session job cap, kept for its job TTL", l.JobTimeoutMs)
	} else {
		line("background jobs: no deadline (limits.jobTimeoutMs sets one); at most the service's per-session job cap, kept for its job TTL")
	}
	line("output: the last %d bytes of each stream are returned; the full output, up to %s per stream, is kept in a spill file in the session directory; a session's spill files together stay within %s (the oldest are removed first) and are removed after %s",
		l.StdoutMaxBytes, formatSize(l.SpillMaxBytes), formatSize(cmp.Or(l.SpillTotalBytes, sandbox.DefaultSpillTotalBytes)),
		cmp.Or(time.Duration(l.SpillRetentionMs)*time.Millisecond, sandbox.DefaultSpillRetention))
	if l.WorkspaceBytes > 0 {
		line("workspace size: the workspace holds at most %s in all, what is there already included (a btrfs qgroup limit or a project quota on its file system; writes past it fail with EDQUOT); a workspace that is neither a btrfs subvolume with quota enabled nor on a file system enforcing project quotas (ext4 with the quota and project features or XFS, mounted prjquota) refuses the call", formatSize(l.WorkspaceBytes))
	}
	explainEnv(p, line)
	switch {
	case p.DenyTTY:
		line("terminal: refused (tty: false); exec -t fails and nothing runs")
	case p.Backend == sandbox.BackendLocal:
		line("terminal: the local backend has none to give; exec -t fails and nothing runs")
	default:
		line("terminal: allowed: exec -t runs the command on a terminal inside the call (output is then one stream)")
	}
	return b.String()
}

// explainImage says where the image comes from and what its signature
// must be.
func explainImage(p sandbox.Policy, line func(string, ...any)) {
	if p.Image == "host" {
		return
	}
	pinned := strings.Contains(p.Image, "@")
	switch p.Pull.Or() {
	case sandbox.PullNever:
		line("image source: pull never: %s must already be in the backend's images (images import, images pull); a missing one refuses the call", p.Image)
	case sandbox.PullAlways:
		line("image source: pull always: %s is pulled from its registry before every call (credentials and plain-HTTP registries only from the operator's --registry-auth and --insecure-registries)", p.Image)
	default:
		line("image source: pull missing (the default): %s is pulled from its registry when the backend does not have it (credentials and plain-HTTP registries only from the operator's --registry-auth and --insecure-registries)", p.Image)
	}
	if pinned {
		line("image digest: pinned: the call runs exactly the image of that digest or is refused")
	}
	if len(p.VerifyKeys) == 0 {
		line("image signature: not required (verify.keys names none)")
		return
	}
	var keys []string
	for _, k := range p.VerifyKeys {
		if pk, err := images.LoadPublicKey(k); err != nil {
			keys = append(keys, k+" (UNUSABLE: "+err.Error()+")")
		} else {
			keys = append(keys, k+" ("+pk.Fingerprint+")")
		}
	}
	line("image signature: required: %s must carry a cosign signature (key-based, in the registry's sha256-<digest>.sig tag) by one of %s; an unsigned image, or one whose signature does not verify, is refused before anything runs", p.Image, strings.Join(keys, ", "))
}

func explainUser(user sandbox.User, line func(string, ...any)) {
	if user.Auto() {
		line("user: auto: the owner of the session's workspace; else of the nearest existing parent of its transcript directory; else nobody (65534:65534); no supplementary groups")
		return
	}
	if user.HostRoot() {
		line("WARNING: user: host-root runs every call as host uid 0:0 without a user namespace (no capabilities, but uid 0 on every host file its mounts expose: it can rewrite root-owned files and leave setuid-root programs there); use it only for trusted work")
		return
	}
	if uid, _, _, err := user.IDs(); err == nil && uid == 0 {
		line("user: %s; no supplementary groups; uid 0 without capabilities cannot override file permissions", user)
		return
	}
	line("user: %s; no supplementary groups", user)
}

func explainFiles(p sandbox.Policy, line func(string, ...any)) {
	if p.Image == "host" {
		line("reads: the host's /usr, /bin, /lib*, /sbin, a generated /etc and a few /etc files (ssl, alternatives, localtime), all read-only; never /etc/shadow, /root or /home")
	} else {
		line("reads: the files of image %s; the root file system is read-only", p.Image)
	}
	// What any session's call sees: the plan of a session with a
	// workspace and a session directory.
	plan := sandbox.NewPlan(p, anySession, Identity{})
	switch ws, ok := plan.Mount(sandbox.MountWorkspace); {
	case !ok:
		line("workspace: not mounted")
	case ws.Writable:
		line("reads and writes: the session's workspace (its cwd), at the same path")
	default:
		line("reads: the session's workspace (its cwd), %s, at the same path", access(ws))
	}
	if tr, ok := plan.Mount(sandbox.MountTranscript); ok {
		line("reads: the session's own transcript directory, %s, at the same path (never the sessions root or other sessions)", access(tr))
		if SessionReadAsOwner(p.Backend) {
			line("the transcript directory is an id-mapped mount through which the harness user who owns it is the call: the call reads the transcript and spill files whatever uid it runs as and whatever their modes, and can change none of them")
		} else {
			line("the transcript directory is a plain read-only bind: a call that does not run as the harness user reads the directory and spill files through the service's ACL entry, not the transcript dsh writes with mode 0600")
		}
	} else {
		line("transcript: not mounted")
	}
	for _, m := range plan.Binds() {
		switch {
		case m.Kind != sandbox.MountPolicy && m.Kind != sandbox.MountRequested:
		case m.Writable:
			line("reads and writes: %s from the host's %s", m.Target, m.Source)
		default:
			line("reads: %s from the host's %s, %s", m.Target, m.Source, access(m))
		}
	}
	for _, r := range p.MountRoots {
		if r.ReadOnly {
			line("may add: read-only bind mounts of what lies below the host's %s, when a call asks (exec --mount, the API's mounts)", r.Path)
		} else {
			line("may add: read-only or read-write bind mounts of what lies below the host's %s, when a call asks (exec --mount, the API's mounts)", r.Path)
		}
	}
	for _, t := range plan.Mounts {
		if t.Bind() {
			continue
		}
		size := "no size of its own"
		if t.SizeBytes > 0 {
			size = "at most " + formatSize(t.SizeBytes)
		}
		line("reads and writes: tmpfs %s, empty at the start of every call, %s, counted against the memory limit", t.Target, size)
	}
	line("every mount is nosuid and nodev; no other host file is visible")
	line("paths: the workspace, the session directory and mount sources are resolved without following links; a link in any component, a system directory (/, /etc, /usr, /proc, …) as the workspace, a workspace outside the configured workspace roots, or a read-write workspace holding the dsh home, the sessions root or the state directory is refused")
}

// anySession stands for every session in Explain: one with a workspace
// and a session directory, at paths no policy mount uses.
var anySession = sandbox.Session{Cwd: "/dsh-sandbox-explain/workspace", TranscriptDir: "/dsh-sandbox-explain/session"}

// access is how a call may use a read-only bind: "read-only", with "and
// noexec" when it cannot run programs from it.
func access(m sandbox.PlanMount) string {
	a := "read-only"
	if m.Writable {
		a = "read-write"
	}
	if m.NoExec {
		a += " and noexec"
	}
	return a
}

// ExplainSession is what `dsh-sandbox policy check` says about a call of
// session s under the valid policy p: the user it runs as (ResolveUser)
// and its plan (ExplainPlan of Plan), then the Warnings for that user. A
// session with neither a cwd nor a transcript directory gets no text. A
// user or plan that cannot be resolved is a warning saying why (the
// service would refuse the call). It reads the file system as
// ResolveUser and Warnings do.
func ExplainSession(p sandbox.Policy, s sandbox.Session) (text string, warnings []string) {
	uid, gid, err := ResolveUser(p, s)
	if err != nil {
		return "", []string{fmt.Sprintf("the user cannot be resolved here: %v", err)}
	}
	warnings = Warnings(p, s, uid, gid)
	if s.Cwd == "" && s.TranscriptDir == "" {
		return "", warnings
	}
	plan, err := Plan(p, s, Identity{UID: uid, GID: gid})
	if err != nil {
		return "", append(warnings, fmt.Sprintf("a call of this session is refused: %v", err))
	}
	return fmt.Sprintf("this session's calls run as %d:%d and see:\n", uid, gid) + ExplainPlan(plan), warnings
}

// ExplainPlan describes, one line each, the mounts, working directory and
// directories of one call's plan (Plan): what `dsh-sandbox policy check`
// prints for the session its flags name, the same plan the backend
// enforces and the audit record lists.
func ExplainPlan(plan sandbox.Plan) string {
	var b strings.Builder
	for _, m := range plan.Mounts {
		flags := []string{map[bool]string{true: "read-write", false: "read-only"}[m.Writable]}
		for _, f := range []struct {
			on   bool
			name string
		}{{m.NoSuid, "nosuid"}, {m.NoDev, "nodev"}, {m.NoExec, "noexec"}} {
			if f.on {
				flags = append(flags, f.name)
			}
		}
		if m.Bind() {
			fmt.Fprintf(&b, "mount %s: %s from the host's %s, %s\n", m.Kind, m.Target, m.Source, strings.Join(flags, ", "))
			continue
		}
		if m.SizeBytes > 0 {
			flags = append(flags, "at most "+formatSize(m.SizeBytes))
		}
		fmt.Fprintf(&b, "mount tmpfs: %s, mode %s, %s\n", m.Target, modeString(m.Mode), strings.Join(flags, ", "))
	}
	fmt.Fprintf(&b, "workdir: %s unless the call names one\n", plan.Workdir)
	for _, d := range plan.Dirs {
		fmt.Fprintf(&b, "creates: %s, mode %s, owned by the harness user\n", d.Path, modeString(d.Mode))
	}
	if plan.SpillDir != "" {
		where := "not visible to later calls (the session directory is not mounted)"
		if plan.SpillInside {
			where = "visible read-only to later calls of the session"
		}
		fmt.Fprintf(&b, "spill: %s, %s\n", plan.SpillDir, where)
	}
	return b.String()
}

func explainEnv(p sandbox.Policy, line func(string, ...any)) {
	base := "the image's base env (PATH, HOME)"
	if p.Backend == sandbox.BackendLocal {
		base = "a standard base env (PATH, HOME)"
	}
	inherit := "nothing"
	if len(p.EnvInherit) > 0 {
		inherit = strings.Join(p.EnvInherit, ", ")
	}
	set := ""
	if len(p.EnvSet) > 0 {
		set = " (the policy sets " + strings.Join(sortedKeys(p.EnvSet), ", ") + "; values not shown)"
	}
	filter := "names that look secret, values that hold credentials (a URL with a password, password=…) and names starting with LD_ are never passed"
	if len(p.EnvAllowSecrets) > 0 {
		filter = "names that look secret and values that hold credentials are dropped, except for " + strings.Join(p.EnvAllowSecrets, ", ") +
			", which env.allowSecrets passes anyway; names starting with LD_ are never passed"
	}
	line("env: built from nothing, in order: %s; from the service's env by name, when set: %s (%s); NO_COLOR=1 TERM=dumb PAGER=cat GIT_PAGER=cat; ordinary env from the policy and trusted callers%s; the session's DSH_* facts last (any other DSH_* name is dropped)",
		base, inherit, filter, set)
	explainRedact(p, line)
}

// explainRedact says which secrets the call's output loses (secrets.Of).
func explainRedact(p sandbox.Policy, line func(string, ...any)) {
	what := "the values of the service's variables whose name or value looks secret (env.allowSecrets names included)"
	if len(p.RedactEnv) > 0 {
		what += ", of " + strings.Join(p.RedactEnv, ", ")
	}
	if len(p.RedactFiles) > 0 {
		what += ", the contents (and each line) of " + strings.Join(p.RedactFiles, ", ") + ", read at call start (a file that cannot be read safely fails the call)"
	}
	if p.RedactDetectors {
		what += ", and their base64 forms,"
	}
	line("redact: %s are replaced by [REDACTED:NAME] in the output, spill files, job output, audit log and hook payloads; values shorter than %d bytes are not redacted", what, redact.MinLen)
	if p.RedactDetectors {
		line("redact: detectors: text of the shapes of known tokens and keys (gitleaks's rules: GitHub, AWS, Slack, private keys, …) is replaced by [REDACTED:<rule>]; output is then passed on line by line (at most %d bytes held back)", redact.MaxLine)
	}
}
