package policy

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
	"time"

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
	if p.Backend == "local" {
		line("WARNING: backend local runs every command directly on the host, with no container: it can read, write and reach whatever the service's own user can. Use it only for trusted development.")
		line("backend: local (no container); image, user, network, mounts and cgroup limits do not apply")
	} else {
		runtime := "runtime " + p.Runtime
		if p.Runtime == "runsc" {
			runtime += " (gVisor: system calls are served by a user-space kernel)"
		}
		line("backend: %s with %s, image %s; one fresh container per call, removed when the call ends", p.Backend, runtime, p.Image)
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
	line("output: the last %d bytes of each stream are returned; the full output, up to %s per stream, is kept in a spill file in the session directory; a session's spill files together stay within %s (the oldest are removed first) and are removed after %s",
		l.StdoutMaxBytes, formatSize(l.SpillMaxBytes), formatSize(cmp.Or(l.SpillTotalBytes, sandbox.DefaultSpillTotalBytes)),
		cmp.Or(time.Duration(l.SpillRetentionMs)*time.Millisecond, sandbox.DefaultSpillRetention))
	explainEnv(p, line)
	switch {
	case p.DenyTTY:
		line("terminal: refused (tty: false); exec -t fails and nothing runs")
	case p.Backend == "local":
		line("terminal: the local backend has none to give; exec -t fails and nothing runs")
	default:
		line("terminal: allowed: exec -t runs the command on a terminal inside the call (output is then one stream)")
	}
	return b.String()
}

func explainUser(user string, line func(string, ...any)) {
	if user == "auto" {
		line("user: auto: the owner of the session's workspace; else of the nearest existing parent of its transcript directory; else nobody (65534:65534); no supplementary groups")
		return
	}
	if user == UserHostRoot {
		line("WARNING: user: host-root runs every call as host uid 0:0 without a user namespace (no capabilities, but uid 0 on every host file its mounts expose: it can rewrite root-owned files and leave setuid-root programs there); use it only for trusted work")
		return
	}
	if uid, _, _, err := parseUser(user); err == nil && uid == 0 {
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
	switch p.Workspace {
	case "rw":
		line("reads and writes: the session's workspace (its cwd), at the same path")
	case "ro":
		line("reads: the session's workspace (its cwd), read-only, at the same path")
	default:
		line("workspace: not mounted")
	}
	if p.Transcript == "ro" {
		line("reads: the session's own transcript directory, read-only and noexec, at the same path (never the sessions root or other sessions)")
	} else {
		line("transcript: not mounted")
	}
	for _, m := range p.Mounts {
		if m.ReadOnly {
			line("reads: %s from the host's %s, read-only", m.Target, m.Source)
		} else {
			line("reads and writes: %s from the host's %s", m.Target, m.Source)
		}
	}
	for _, r := range p.MountRoots {
		if r.ReadOnly {
			line("may add: read-only bind mounts of what lies below the host's %s, when a call asks (exec --mount, the API's mounts)", r.Path)
		} else {
			line("may add: read-only or read-write bind mounts of what lies below the host's %s, when a call asks (exec --mount, the API's mounts)", r.Path)
		}
	}
	for _, t := range p.Tmpfs {
		size := "no size of its own"
		if t.SizeBytes > 0 {
			size = "at most " + formatSize(t.SizeBytes)
		}
		line("reads and writes: tmpfs %s, empty at the start of every call, %s, counted against the memory limit", t.Target, size)
	}
	line("every mount is nosuid and nodev; no other host file is visible")
	line("paths: the workspace, the session directory and mount sources are resolved without following links; a link in any component, a system directory (/, /etc, /usr, /proc, …) as the workspace, a workspace outside the configured workspace roots, or a read-write workspace holding the dsh home, the sessions root or the state directory is refused")
}

func explainEnv(p sandbox.Policy, line func(string, ...any)) {
	base := "the image's base env (PATH, HOME)"
	if p.Backend == "local" {
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

// explainRedact says which secrets the call's output loses (sandbox.CallSecrets).
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
}
