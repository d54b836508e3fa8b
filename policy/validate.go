package policy

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/hostpath"
)

// Allowed values of the enumerated fields, in the order error messages
// list them.
var (
	mountModes = []string{"ro", "rw"}
)

// Bounds of the limits. The lower bounds are what the kernel and the
// runtimes accept (a memory cgroup below 6 MiB cannot start a shell, a CPU
// quota below 1 ms per 100 ms period is refused); the upper bounds keep a
// typo from meaning "unlimited".
const (
	minMemoryBytes    = 6 << 20
	minCPUs           = 0.01
	maxCPUs           = 1024
	maxPids           = 1 << 22 // the kernel's PID_MAX_LIMIT
	maxStdoutMaxBytes = 16 << 20
	maxListLen        = 128
	maxNameLen        = 64
	maxImageLen       = 400
	maxPathLen        = 4096
	maxEnvNameLen     = 256
	nobodyID          = 65534
)

// reservedTargets are where the runtime mounts the kernel's own
// filesystems; no policy mount or session path may land on or under them.
var reservedTargets = []string{"/proc", "/dev", "/sys"}

// validate checks a policy whose zero limits have been filled in and
// records every problem, naming fields the way a policy file spells them.
// Mounts and tmpfs are checked in the order given, so list indices match
// the document. The backend must be one of backends, when they are given
// (a policy document entering: FileChecks.Backends); a policy already
// resolved (nil: Normalize, Plan) needs only a backend's name, since which
// backends exist is the program's registry's, which refuses any other
// when it resolves the executor.
func validate(p *sandbox.Policy, backends []sandbox.Backend, ps *problems) {
	checkName(p.Name, ps)
	known := checkBackend(p.Backend, backends, ps)
	checkEnum("runtime", p.Runtime, sandbox.Runtimes, ps)
	checkImage(p.Image, ps)
	checkPull(p, ps)
	if _, _, _, err := p.User.IDs(); err != nil {
		ps.add("user", "%v", err)
	}
	checkEnum("network", p.Network, sandbox.NetworkModes, ps)
	checkNetworkRules(p.Backend, known, p.Network, p.NetworkAllow, p.NetworkDeny, ps)
	checkCredentials(*p, known, ps)
	checkEnum("workspace", p.Workspace, sandbox.WorkspaceModes, ps)
	checkEnum("transcript", p.Transcript, sandbox.TranscriptModes, ps)
	checkMounts(p.Mounts, p.Tmpfs, ps)
	checkMountRoots(p.MountRoots, ps)
	checkLimits(p.Limits, ps)
	checkWorkspaceBytes(p, ps)
	checkEnv(p.EnvInherit, p.EnvSet, ps)
	checkAllowSecrets(p.EnvAllowSecrets, p.EnvInherit, ps)
	checkRedact(p.RedactEnv, p.RedactFiles, ps)
}

func checkName(name string, ps *problems) {
	if err := validName(name); err != nil {
		ps.add("name", "%v", err)
	}
}

// validName accepts 1 to 64 characters from [A-Za-z0-9._-], starting with
// a letter or digit, so that a name is safe in labels, logs and file names.
func validName(name string) error {
	if name == "" || len(name) > maxNameLen {
		return fmt.Errorf("%q must be 1 to %d characters", name, maxNameLen)
	}
	for i, r := range name {
		if !isAlnum(r) && (i == 0 || !strings.ContainsRune("._-", r)) {
			return fmt.Errorf("%q may hold only letters, digits, '.', '_' and '-', and must start with a letter or digit", name)
		}
	}
	return nil
}

// defaultBackends are the backends a policy document may name when its
// reader gives none (FileChecks.Backends): those package sandbox names.
var defaultBackends = []sandbox.Backend{sandbox.BackendOCI, sandbox.BackendDocker, sandbox.BackendContainerd, sandbox.BackendLocal}

// checkBackend checks that backend is one of backends or, with none
// given, a name (validName); it reports whether it is.
func checkBackend(backend sandbox.Backend, backends []sandbox.Backend, ps *problems) bool {
	if backends != nil {
		ok := slices.Contains(backends, backend)
		checkEnum("backend", backend, backends, ps)
		return ok
	}
	if err := validName(string(backend)); err != nil {
		ps.add("backend", "%v", err)
		return false
	}
	return true
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

func checkEnum[T ~string](field string, v T, allowed []T, ps *problems) {
	if !slices.Contains(allowed, v) {
		ps.add(field, "%q is not allowed; want one of %s", v, sandbox.JoinModes(allowed, ", "))
	}
}

// checkImage accepts "host" or a local image reference: 1 to 255
// characters from [A-Za-z0-9._/:@-] starting with a letter or digit.
func checkImage(image string, ps *problems) {
	if image == "" || len(image) > maxImageLen {
		ps.add("image", "%q must be \"host\" or an image reference of 1 to %d characters", image, maxImageLen)
		return
	}
	for i, r := range image {
		if !isAlnum(r) && (i == 0 || !strings.ContainsRune("._/:@-", r)) {
			ps.add("image", "%q is not \"host\" or an image reference (letters, digits and . _ / : @ -)", image)
			return
		}
	}
}

// pullingBackends are the backends that pull and verify images.
var pullingBackends = []sandbox.Backend{sandbox.BackendOCI, sandbox.BackendDocker, sandbox.BackendContainerd}

// checkPull checks pull and verify.keys: keys are absolute paths, and
// only an image from a registry can carry a signature.
func checkPull(p *sandbox.Policy, ps *problems) {
	if p.Pull != "" {
		checkEnum("pull", p.Pull, sandbox.PullModes, ps)
	}
	if len(p.VerifyKeys) > maxListLen {
		ps.add("verify.keys", "has %d entries; the limit is %d", len(p.VerifyKeys), maxListLen)
		return
	}
	for i, k := range p.VerifyKeys {
		if strings.IndexByte(k, 0) >= 0 || !filepath.IsAbs(k) || filepath.Clean(k) != k {
			ps.add(fmt.Sprintf("verify.keys[%d]", i), "%q is not an absolute, clean path of a PEM public key", k)
		}
	}
	if len(p.VerifyKeys) > 0 {
		switch {
		case p.Image == "host":
			ps.add("verify.keys", "image %q is generated on this machine and carries no signature; name an image from a registry", p.Image)
		case p.Backend == sandbox.BackendLocal:
			ps.add("verify.keys", "backend local runs no image, so nothing can be verified")
		case !slices.Contains(pullingBackends, p.Backend):
			// Fail closed: these backends would run the image unverified.
			ps.add("verify.keys", "backend %s does not pull or verify images yet (%s do); refusing rather than running an unverified image", p.Backend, sandbox.JoinModes(pullingBackends, ", "))
		}
	}
	if p.Pull == sandbox.PullAlways && !slices.Contains(pullingBackends, p.Backend) && p.Backend != sandbox.BackendLocal {
		ps.add("pull", "%q: backend %s does not pull images yet (%s do); import the image into it", p.Pull, p.Backend, sandbox.JoinModes(pullingBackends, ", "))
	}
}

// checkAbsPath accepts an absolute, clean path of at most 4096 bytes
// without control characters (NUL, newline, …).
func checkAbsPath(field, p string, ps *problems) bool {
	switch {
	case p == "":
		ps.add(field, "is missing or empty; want an absolute path")
	case len(p) > maxPathLen:
		ps.add(field, "is longer than %d bytes", maxPathLen)
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		ps.add(field, "%q contains a control character", p)
	case !filepath.IsAbs(p):
		ps.add(field, "%q is not an absolute path", p)
	case filepath.Clean(p) != p:
		ps.add(field, "%q is not a clean path; write %q", p, filepath.Clean(p))
	default:
		return true
	}
	return false
}

// within reports whether path p is dir or lies below it. Both are clean
// absolute paths.
func within(p, dir string) bool {
	if dir == "/" {
		return true
	}
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// reserved names the kernel filesystem p is, or lies in, or "" when p is
// free. "/" itself is reserved: nothing may be mounted over the root.
func reserved(p string) string {
	if p == "/" {
		return "/"
	}
	for _, r := range reservedTargets {
		if within(p, r) {
			return r
		}
	}
	return ""
}

func checkMounts(mounts []sandbox.Mount, tmpfs []sandbox.Tmpfs, ps *problems) {
	if len(mounts) > maxListLen {
		ps.add("mounts", "has %d entries; the limit is %d", len(mounts), maxListLen)
		return
	}
	if len(tmpfs) > maxListLen {
		ps.add("tmpfs", "has %d entries; the limit is %d", len(tmpfs), maxListLen)
		return
	}
	targets := map[string]string{} // target -> field that claimed it
	claim := func(field, target string) {
		if reserved(target) != "" {
			ps.add(field, "%q may not be / or lie below /proc, /dev or /sys", target)
			return
		}
		if prev, ok := targets[target]; ok {
			ps.add(field, "%q is already the target of %s", target, prev)
			return
		}
		targets[target] = field
	}
	for i, t := range tmpfs {
		f := fmt.Sprintf("tmpfs[%d]", i)
		if checkAbsPath(f+".target", t.Target, ps) {
			claim(f+".target", t.Target)
		}
		if t.SizeBytes < 0 {
			ps.add(f+".size", "%d is negative", t.SizeBytes)
		}
	}
	for i, m := range mounts {
		f := fmt.Sprintf("mounts[%d]", i)
		if checkAbsPath(f+".source", m.Source, ps) {
			if reserved(m.Source) != "" {
				ps.add(f+".source", "%q may not be / or lie below /proc, /dev or /sys", m.Source)
			}
		}
		if checkAbsPath(f+".target", m.Target, ps) {
			claim(f+".target", m.Target)
		}
	}
}

// checkMountRoots accepts clean absolute directories, each listed once,
// none of them a system directory (hostpath.SystemDir: /, /etc, /usr,
// /home, …) or below /proc, /dev or /sys: a root opens everything below
// it to every caller of the policy.
func checkMountRoots(roots []sandbox.MountRoot, ps *problems) {
	if len(roots) > maxListLen {
		ps.add("mountRoots", "has %d entries; the limit is %d", len(roots), maxListLen)
		return
	}
	seen := map[string]bool{}
	for i, r := range roots {
		f := fmt.Sprintf("mountRoots[%d].path", i)
		switch {
		case !checkAbsPath(f, r.Path, ps):
		case reserved(r.Path) != "" || hostpath.SystemDir(r.Path):
			ps.add(f, "%q is a system directory (/, /etc, /usr, /home, /proc, …); name a directory below it", r.Path)
		case seen[r.Path]:
			ps.add(f, "%q is listed twice", r.Path)
		}
		seen[r.Path] = true
	}
}

// checkWorkspaceBytes: limits.workspaceBytes is a size ≥ 0, and bounds
// only a workspace the call may write (workspace: rw) on a backend whose
// calls run without privileges (the local backend runs them with the
// service's own, which a quota does not bind when it is root).
func checkWorkspaceBytes(p *sandbox.Policy, ps *problems) {
	switch b := p.Limits.WorkspaceBytes; {
	case b == 0:
	case b < 0:
		ps.add("limits.workspaceBytes", "%d is not allowed; want a size > 0 (0 or no entry: no bound)", b)
	case p.Workspace != sandbox.WorkspaceRW:
		ps.add("limits.workspaceBytes", "bounds a workspace the call writes; workspace is %q (want rw, or drop the limit)", p.Workspace)
	case p.Backend == sandbox.BackendLocal:
		ps.add("limits.workspaceBytes", "the local backend runs calls with the service's own privileges, which may lift the bound (a project quota does not bind them; a btrfs qgroup limit they may change); use a container backend")
	}
}

// maxSpillRetention bounds limits.spillRetention, as prepare.Call does.
const maxSpillRetention = 366 * 24 * time.Hour

func checkLimits(l sandbox.Limits, ps *problems) {
	if l.MemoryBytes < minMemoryBytes {
		ps.add("limits.memory", "%d bytes is below the minimum of %s", l.MemoryBytes, formatSize(minMemoryBytes))
	}
	if math.IsNaN(l.CPUs) || l.CPUs < minCPUs || l.CPUs > maxCPUs {
		ps.add("limits.cpus", "%v is not allowed; want a number from %v to %v", l.CPUs, minCPUs, maxCPUs)
	}
	if l.Pids <= 0 || l.Pids > maxPids {
		ps.add("limits.pids", "%d is not allowed; want an integer from 1 to %d", l.Pids, maxPids)
	}
	if l.MaxTimeoutMs <= 0 || l.MaxTimeoutMs > sandbox.DefaultMaxTimeout.Milliseconds() {
		ps.add("limits.maxTimeoutMs", "%d is not allowed; want an integer from 1 to %d", l.MaxTimeoutMs, sandbox.DefaultMaxTimeout.Milliseconds())
	}
	if l.JobTimeoutMs < 0 {
		ps.add("limits.jobTimeoutMs", "%d is not allowed; want 0 (no deadline for background jobs) or an integer > 0", l.JobTimeoutMs)
	}
	if l.TimeoutMs <= 0 {
		ps.add("limits.timeoutMs", "%d is not allowed; want an integer > 0", l.TimeoutMs)
	} else if l.MaxTimeoutMs > 0 && l.TimeoutMs > l.MaxTimeoutMs {
		ps.add("limits.timeoutMs", "%d exceeds limits.maxTimeoutMs %d", l.TimeoutMs, l.MaxTimeoutMs)
	}
	if l.StdoutMaxBytes <= 0 || l.StdoutMaxBytes > maxStdoutMaxBytes {
		ps.add("limits.stdoutMaxBytes", "%d is not allowed; want 1 to %d bytes", l.StdoutMaxBytes, maxStdoutMaxBytes)
	}
	if l.SpillMaxBytes <= 0 {
		ps.add("limits.spillMaxBytes", "%d is not allowed; want a size > 0", l.SpillMaxBytes)
	}
	if l.SpillTotalBytes < 0 {
		ps.add("limits.spillTotalBytes", "%d is not allowed; want a size > 0 (0 means the default, 256Mi)", l.SpillTotalBytes)
	}
	if l.SpillRetentionMs < 0 || l.SpillRetentionMs > maxSpillRetention.Milliseconds() {
		ps.add("limits.spillRetention", "%dms is not allowed; want at most %s (0 means the default, 24h)", l.SpillRetentionMs, maxSpillRetention)
	}
}

// isDSH reports whether an environment name is in the DSH_ namespace,
// ignoring case, as childenv.Build does.
func isDSH(name string) bool {
	return len(name) >= 4 && strings.EqualFold(name[:4], "DSH_")
}

func checkEnv(inherit []string, set map[string]string, ps *problems) {
	if len(inherit) > maxListLen || len(set) > maxListLen {
		ps.add("env", "lists more than %d names", maxListLen)
		return
	}
	seen := map[string]bool{}
	for i, name := range inherit {
		f := fmt.Sprintf("env.inherit[%d]", i)
		switch {
		case !portableName(name):
			ps.add(f, "%q is not a variable name; want [A-Za-z_][A-Za-z0-9_]*", name)
		case isDSH(name):
			ps.add(f, "%q may not be inherited: DSH_* values come only from the session's snapshot", name)
		case seen[name]:
			ps.add(f, "%q is listed twice", name)
		}
		seen[name] = true
	}
	for _, name := range sortedKeys(set) {
		f := "env.set." + name
		switch {
		case name == "" || len(name) > maxEnvNameLen:
			ps.add("env.set", "a name is empty or longer than %d bytes", maxEnvNameLen)
		case strings.ContainsAny(name, "=\x00"):
			ps.add("env.set", "name %q contains '=' or a NUL byte", name)
		case isDSH(name):
			ps.add(f, "DSH_* names may not be set by a policy: DSH_* values come only from the session's snapshot")
		case strings.ContainsRune(set[name], 0):
			ps.add(f, "the value contains a NUL byte")
		}
	}
}

// checkAllowSecrets checks env.allowSecrets: each name a variable name,
// listed once, also in env.inherit (allowing a name the policy does not
// inherit would do nothing, which is a mistake worth naming), and never
// a DSH_* or LD_* name, which no policy passes.
func checkAllowSecrets(allow, inherit []string, ps *problems) {
	if len(allow) > maxListLen {
		ps.add("env.allowSecrets", "lists more than %d names", maxListLen)
		return
	}
	seen := map[string]bool{}
	for i, name := range allow {
		f := fmt.Sprintf("env.allowSecrets[%d]", i)
		switch {
		case !portableName(name):
			ps.add(f, "%q is not a variable name; want [A-Za-z_][A-Za-z0-9_]*", name)
		case isDSH(name):
			ps.add(f, "%q may not be passed: DSH_* values come only from the session's snapshot", name)
		case len(name) >= 3 && strings.EqualFold(name[:3], "LD_"):
			ps.add(f, "%q may not be passed: LD_* variables are never inherited", name)
		case seen[name]:
			ps.add(f, "%q is listed twice", name)
		case !slices.Contains(inherit, name):
			ps.add(f, "%q is not in env.inherit; list it there too (allowSecrets only lifts the secret filter of inherited names)", name)
		}
		seen[name] = true
	}
}

// portableName reports whether s is a POSIX portable variable name of at
// most 256 bytes.
func portableName(s string) bool {
	if s == "" || len(s) > maxEnvNameLen || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, r := range s {
		if !isAlnum(r) && r != '_' {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkRedact checks the redact section: env names are variable names,
// files absolute clean paths, each listed once, at most maxListLen of
// each. Whether a file can be read is checked at call start
// (secrets.Of), when its content is needed.
func checkRedact(env, files []string, ps *problems) {
	lists := []struct {
		field string
		items []string
		bad   func(string) string
	}{
		{"redact.env", env, func(name string) string {
			if !portableName(name) {
				return fmt.Sprintf("%q is not a variable name; want [A-Za-z_][A-Za-z0-9_]*", name)
			}
			return ""
		}},
		{"redact.files", files, func(path string) string {
			switch {
			case strings.IndexByte(path, 0) >= 0:
				return "contains a NUL byte"
			case !filepath.IsAbs(path) || filepath.Clean(path) != path:
				return fmt.Sprintf("%q is not an absolute, clean path", path)
			}
			return ""
		}},
	}
	for _, l := range lists {
		if len(l.items) > maxListLen {
			ps.add(l.field, "has %d entries; the limit is %d", len(l.items), maxListLen)
			continue
		}
		seen := map[string]bool{}
		for i, v := range l.items {
			f := fmt.Sprintf("%s[%d]", l.field, i)
			if msg := l.bad(v); msg != "" {
				ps.add(f, "%s", msg)
			} else if seen[v] {
				ps.add(f, "%q is listed twice", v)
			}
			seen[v] = true
		}
	}
}
