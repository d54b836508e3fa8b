package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Defaults of a policy file's absent keys (DESIGN §3.9); they are the
// workspace-write profile.
const (
	DefaultBackend    = sandbox.BackendOCI
	DefaultRuntime    = sandbox.RuntimeRunc
	DefaultImage      = "host"
	DefaultUser       = sandbox.UserAuto
	DefaultNetwork    = sandbox.NetworkNone
	DefaultWorkspace  = sandbox.WorkspaceRW
	DefaultTranscript = sandbox.TranscriptRO
	// DefaultMemoryBytes is the memory limit, swap included: 1 GiB.
	DefaultMemoryBytes = 1 << 30
	// DefaultCPUs is the CPU quota in cores.
	DefaultCPUs = 1.0
	// DefaultPids is the task limit.
	DefaultPids = 256
)

// defaultEnvInherit are the variables a policy inherits by name when its
// file has no env.inherit.
var defaultEnvInherit = []string{"LANG", "TZ"}

// defaults returns the policy every document starts from.
func defaults() sandbox.Policy {
	return sandbox.Policy{
		Name:       "workspace-write",
		Backend:    DefaultBackend,
		Runtime:    DefaultRuntime,
		Image:      DefaultImage,
		User:       DefaultUser,
		Network:    DefaultNetwork,
		Workspace:  DefaultWorkspace,
		Transcript: DefaultTranscript,
		Tmpfs:      []sandbox.Tmpfs{{Target: "/tmp"}},
		Limits:     LimitsOrDefault(sandbox.Limits{}),
		EnvInherit: slices.Clone(defaultEnvInherit),
	}
}

// LimitsOrDefault returns l with its zero fields at the defaults that
// sandbox.Limits documents (DefaultMemoryBytes, DefaultCPUs, DefaultPids,
// …): the one place that decides them, for the policy's checks, its spec
// options and the backends that configure a daemon (docker). A zero
// timeout takes the default of 120 s, or the maximum when the maximum is
// smaller.
func LimitsOrDefault(l sandbox.Limits) sandbox.Limits {
	if l.MemoryBytes == 0 {
		l.MemoryBytes = DefaultMemoryBytes
	}
	if l.CPUs == 0 {
		l.CPUs = DefaultCPUs
	}
	if l.Pids == 0 {
		l.Pids = DefaultPids
	}
	if l.MaxTimeoutMs == 0 {
		l.MaxTimeoutMs = sandbox.DefaultMaxTimeout.Milliseconds()
	}
	if l.TimeoutMs == 0 {
		l.TimeoutMs = min(sandbox.DefaultTimeout.Milliseconds(), max(l.MaxTimeoutMs, 1))
	}
	if l.StdoutMaxBytes == 0 {
		l.StdoutMaxBytes = sandbox.DefaultStdoutMaxBytes
	}
	if l.SpillMaxBytes == 0 {
		l.SpillMaxBytes = sandbox.DefaultSpillMaxBytes
	}
	return l
}

// fromDocument overlays a decoded document on the defaults, validates the
// result (its backend one of backends) and returns it normalized and
// digested.
func fromDocument(doc *document, defaultName, where string, backends []sandbox.Backend) (sandbox.Policy, error) {
	p := defaults()
	p.Name = defaultName
	var ps problems
	str(&p.Name, doc.Name)
	str(&p.Backend, doc.Backend)
	str(&p.Runtime, doc.Runtime)
	str(&p.Image, doc.Image)
	str(&p.Pull, doc.Pull)
	if doc.Verify != nil {
		if len(doc.Verify.Keys) == 0 {
			ps.add("verify.keys", "is missing or empty; want the PEM public key files of which one must have signed the image")
		}
		p.VerifyKeys = slices.Clone(doc.Verify.Keys)
	}
	str(&p.User, doc.User)
	if n := doc.Network; n != nil {
		if n.Mode == nil {
			ps.add("network.mode", "is missing; want one of %s", sandbox.JoinModes(sandbox.NetworkModes, ", "))
		} else {
			p.Network = sandbox.NetworkMode(*n.Mode)
		}
		p.NetworkAllow, p.NetworkDeny = slices.Clone(n.Allow), slices.Clone(n.Deny)
		p.Credentials = credentialsFromDocument(n.Credentials, &ps)
	}
	str(&p.Workspace, doc.Workspace)
	str(&p.Transcript, doc.Transcript)

	mountsFromDocument(doc, &p, &ps)

	if doc.Limits != nil {
		limitsFromDocument(doc.Limits, &p.Limits, &ps)
	}

	if doc.Env != nil {
		envFromDocument(doc.Env, &p)
	}

	if doc.TTY != nil {
		p.DenyTTY = !*doc.TTY
	}

	if r := doc.Redact; r != nil {
		p.RedactEnv, p.RedactFiles = slices.Clone(r.Env), slices.Clone(r.Files)
		p.RedactDetectors = r.Detectors != nil && *r.Detectors
	}

	validate(&p, backends, &ps)
	if err := ps.err(where); err != nil {
		return sandbox.Policy{}, err
	}
	return finish(p), nil
}

// mountsFromDocument sets p's mounts, mount roots and tmpfs from the
// document's; a missing source, target or path is reported by validate.
func mountsFromDocument(doc *document, p *sandbox.Policy, ps *problems) {
	if doc.Mounts != nil {
		p.Mounts = make([]sandbox.Mount, 0, len(doc.Mounts))
	}
	for i, m := range doc.Mounts {
		f := fmt.Sprintf("mounts[%d]", i)
		var out sandbox.Mount // a missing source or target is reported by validate
		str(&out.Source, m.Source)
		str(&out.Target, m.Target)
		out.ReadOnly = mountMode(f+".mode", m.Mode, ps)
		p.Mounts = append(p.Mounts, out)
	}

	for i, r := range doc.MountRoots {
		var out sandbox.MountRoot // a missing path is reported by validate
		str(&out.Path, r.Path)
		out.ReadOnly = mountMode(fmt.Sprintf("mountRoots[%d].mode", i), r.Mode, ps)
		p.MountRoots = append(p.MountRoots, out)
	}

	if doc.Tmpfs != nil {
		p.Tmpfs = make([]sandbox.Tmpfs, 0, len(doc.Tmpfs))
	}
	for i, t := range doc.Tmpfs {
		f := fmt.Sprintf("tmpfs[%d]", i)
		var out sandbox.Tmpfs
		str(&out.Target, t.Target)
		if t.Size != nil {
			out.SizeBytes = sizeField(f+".size", *t.Size, ps)
		}
		p.Tmpfs = append(p.Tmpfs, out)
	}
}

// limitsFromDocument overlays the document's limits l on lim, the
// defaults.
func limitsFromDocument(l *documentLimits, lim *sandbox.Limits, ps *problems) {
	if l.Memory != nil {
		lim.MemoryBytes = sizeField("limits.memory", *l.Memory, ps)
	}
	if l.CPUs != nil {
		lim.CPUs = *l.CPUs
	}
	if l.Pids != nil {
		lim.Pids = *l.Pids
	}
	if l.MaxTimeoutMs != nil {
		lim.MaxTimeoutMs = *l.MaxTimeoutMs
	}
	if l.JobTimeoutMs != nil {
		lim.JobTimeoutMs = *l.JobTimeoutMs
	}
	switch {
	case l.TimeoutMs != nil:
		lim.TimeoutMs = *l.TimeoutMs
	case lim.MaxTimeoutMs > 0:
		// A file that lowers only the maximum lowers the default with it.
		lim.TimeoutMs = min(lim.TimeoutMs, lim.MaxTimeoutMs)
	}
	if l.StdoutMaxBytes != nil {
		n := sizeField("limits.stdoutMaxBytes", *l.StdoutMaxBytes, ps)
		if n > maxStdoutMaxBytes {
			n = maxStdoutMaxBytes + 1 // reported by validate, without overflowing int
		}
		lim.StdoutMaxBytes = int(n)
	}
	if l.SpillMaxBytes != nil {
		lim.SpillMaxBytes = sizeField("limits.spillMaxBytes", *l.SpillMaxBytes, ps)
	}
	if l.SpillTotalBytes != nil {
		lim.SpillTotalBytes = sizeField("limits.spillTotalBytes", *l.SpillTotalBytes, ps)
	}
	if l.WorkspaceBytes != nil {
		lim.WorkspaceBytes = sizeField("limits.workspaceBytes", *l.WorkspaceBytes, ps)
	}
	if l.SpillRetention != nil {
		lim.SpillRetentionMs = retentionField("limits.spillRetention", *l.SpillRetention, ps)
	}
}

// envFromDocument sets the environment fields of p that the document's
// env section e sets.
func envFromDocument(e *documentEnv, p *sandbox.Policy) {
	if e.Inherit != nil {
		p.EnvInherit = slices.Clone(e.Inherit)
	}
	if e.AllowSecrets != nil {
		p.EnvAllowSecrets = slices.Clone(e.AllowSecrets)
	}
	if e.Set != nil {
		p.EnvSet = make(map[string]string, len(e.Set))
		for k, v := range e.Set {
			p.EnvSet[k] = string(v)
		}
	}
}

// str sets *dst to the document's value src, when it has one; validate
// checks it afterwards.
func str[T ~string](dst *T, src *string) {
	if src != nil {
		*dst = T(*src)
	}
}

// mountMode reads the mode of a mount or mount root, ro or rw (required),
// and reports whether it is read-only.
func mountMode(field string, mode *string, ps *problems) bool {
	switch {
	case mode == nil:
		ps.add(field, "is missing; want one of %s", strings.Join(mountModes, ", "))
	case !slices.Contains(mountModes, *mode):
		ps.add(field, "%q is not allowed; want one of %s", *mode, strings.Join(mountModes, ", "))
	}
	return mode == nil || *mode != "rw"
}

// sizeField parses a size written in the document and records a problem
// naming the field when it is not a size or not positive.
func sizeField(field string, v sizeValue, ps *problems) int64 {
	n, err := parseSize(string(v))
	switch {
	case err != nil:
		ps.add(field, "%v", err)
		return 0
	case n == 0:
		ps.add(field, "is 0; want a size > 0 (omit the key for the default)")
	}
	return n
}

// retentionField parses a Go duration ("24h", "90m") written in the
// document into milliseconds and records a problem naming the field when
// it is not one or not positive.
func retentionField(field, v string, ps *problems) int64 {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		ps.add(field, "%q is not a duration such as \"24h\"", v)
		return 0
	case d < time.Millisecond:
		ps.add(field, "%s is not allowed; want a duration ≥ 1ms (omit the key for the default, 24h)", v)
		return 0
	}
	return d.Milliseconds()
}

// Normalize returns p resolved the way Parse resolves a file: zero limits
// and an empty runtime take their defaults, /tmp is added to the tmpfs
// list when missing, mounts and tmpfs are sorted parents first (the order
// they are mounted in), env.inherit is sorted, and Digest is recomputed.
// It returns an invalid-argument error naming every field that fails
// validation; the backend needs only to be a name here (which backends
// exist is the program's registry's, checked where a policy file is read,
// FileChecks.Backends, and where its executor is resolved). Call it after
// changing any field of a resolved policy. p is not modified.
func Normalize(p sandbox.Policy) (sandbox.Policy, error) {
	q := clonePolicy(p)
	if q.Runtime == "" {
		q.Runtime = DefaultRuntime
	}
	q.Limits = LimitsOrDefault(q.Limits)
	var ps problems
	validate(&q, nil, &ps)
	if err := ps.err("policy"); err != nil {
		return sandbox.Policy{}, err
	}
	return finish(q), nil
}

// Validate reports, as one invalid-argument error naming each offending
// field, whether p is a valid policy; zero limits and an empty runtime
// count as their defaults. It does not check Digest.
func Validate(p sandbox.Policy) error {
	_, err := Normalize(p)
	return err
}

// finish puts a validated policy in normal form and digests it.
func finish(p sandbox.Policy) sandbox.Policy {
	p.Tmpfs = p.CallTmpfs()
	slices.SortStableFunc(p.Mounts, func(a, b sandbox.Mount) int { return comparePaths(a.Target, b.Target) })
	slices.SortStableFunc(p.Tmpfs, func(a, b sandbox.Tmpfs) int { return comparePaths(a.Target, b.Target) })
	slices.SortStableFunc(p.MountRoots, func(a, b sandbox.MountRoot) int { return comparePaths(a.Path, b.Path) })
	slices.Sort(p.EnvInherit)
	slices.Sort(p.EnvAllowSecrets)
	if len(p.EnvAllowSecrets) == 0 {
		p.EnvAllowSecrets = nil
	}
	slices.Sort(p.RedactEnv)
	slices.Sort(p.RedactFiles)
	slices.Sort(p.VerifyKeys)
	if len(p.VerifyKeys) == 0 {
		p.VerifyKeys = nil
	}
	if len(p.RedactEnv) == 0 {
		p.RedactEnv = nil
	}
	if len(p.RedactFiles) == 0 {
		p.RedactFiles = nil
	}
	if len(p.Mounts) == 0 {
		p.Mounts = nil
	}
	if len(p.MountRoots) == 0 {
		p.MountRoots = nil
	}
	if len(p.EnvInherit) == 0 {
		p.EnvInherit = nil
	}
	if len(p.NetworkAllow) == 0 {
		p.NetworkAllow = nil
	}
	if len(p.NetworkDeny) == 0 {
		p.NetworkDeny = nil
	}
	if len(p.Credentials) == 0 {
		p.Credentials = nil
	}
	if len(p.EnvSet) == 0 {
		p.EnvSet = nil
	}
	p.Digest = digest(p)
	return p
}

// comparePaths orders mount targets parents first: by depth, then by name.
func comparePaths(a, b string) int {
	if da, db := sandbox.PathDepth(a), sandbox.PathDepth(b); da != db {
		return da - db
	}
	return strings.Compare(a, b)
}

// digest is the sha256 of the policy's JSON encoding without its Digest.
// encoding/json writes struct fields in declaration order and map keys
// sorted, so the encoding of a normalized policy is canonical.
func digest(p sandbox.Policy) string {
	p.Digest = ""
	b, err := json.Marshal(p)
	if err != nil {
		// A Policy holds only strings, numbers, slices and a string map;
		// a validated one has no NaN. Marshal cannot fail.
		panic("policy: encoding a validated policy: " + err.Error())
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// clonePolicy returns a deep copy of p.
func clonePolicy(p sandbox.Policy) sandbox.Policy {
	p.Mounts = slices.Clone(p.Mounts)
	p.MountRoots = slices.Clone(p.MountRoots)
	p.Tmpfs = slices.Clone(p.Tmpfs)
	p.EnvInherit = slices.Clone(p.EnvInherit)
	p.NetworkAllow = slices.Clone(p.NetworkAllow)
	p.NetworkDeny = slices.Clone(p.NetworkDeny)
	p.Credentials = slices.Clone(p.Credentials)
	p.EnvAllowSecrets = slices.Clone(p.EnvAllowSecrets)
	p.EnvSet = maps.Clone(p.EnvSet)
	p.RedactEnv = slices.Clone(p.RedactEnv)
	p.RedactFiles = slices.Clone(p.RedactFiles)
	p.VerifyKeys = slices.Clone(p.VerifyKeys)
	return p
}
