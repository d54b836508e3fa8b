package policy

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/hostpath"
)

// Narrowing is what one call asks to tighten in its policy: the per-call
// flags of `exec` and the same fields of the API's run and job requests.
// A zero field asks for nothing and keeps the policy's value. Narrowing
// never widens: asking more than the policy allows is refused.
type Narrowing struct {
	// MemoryBytes lowers limits.memory; at least the minimum a policy
	// may set (6 MiB).
	MemoryBytes int64 `json:"memoryBytes,omitempty"`
	// CPUs lowers limits.cpus.
	CPUs float64 `json:"cpus,omitempty"`
	// Pids lowers limits.pids.
	Pids int64 `json:"pids,omitempty"`
	// TimeoutMs is the call's timeout; at most limits.maxTimeoutMs.
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// Network is "none" (always allowed), "loopback" (only when the
	// policy's network is loopback or allowlist) or "allowlist" (only
	// when the policy's is, keeping its lists); "" keeps the policy's.
	Network sandbox.NetworkMode `json:"network,omitempty"`
	// WorkspaceBytes bounds what the workspace holds (btrfs qgroups or
	// project quotas); at most limits.workspaceBytes when the policy sets
	// it. It needs a
	// policy that allows the bound (workspace rw, a container backend).
	WorkspaceBytes int64 `json:"workspaceBytes,omitempty"`
	// Mounts are extra bind mounts the call asks for. Each source must
	// be a clean absolute path at or below one of the policy's
	// mountRoots, and a read-write mount needs a read-write root; the
	// caller also resolves the sources (CheckMountSources).
	Mounts []sandbox.Mount `json:"mounts,omitempty"`
}

// NarrowError is a refused Narrowing; Field is the Narrowing field's JSON
// name ("memoryBytes", "cpus", "pids", "timeoutMs", "network",
// "workspaceBytes", "mounts"), for callers that name their own flag or field. It wraps
// sandbox.ErrInvalid.
type NarrowError struct {
	Field  string
	Reason string
}

func (e *NarrowError) Error() string { return "policy: " + e.Field + ": " + e.Reason }

// Unwrap makes a NarrowError an invalid-argument error (exit code 2, 400).
func (e *NarrowError) Unwrap() error { return sandbox.ErrInvalid }

// Narrow returns p tightened by n, normalized and digested again (its
// name is kept). A field asking more than p allows, or an invalid value,
// is refused with a *NarrowError naming the field; the first refused
// field in the order of Narrowing is reported. p is not modified. It is a
// pure function: it reads no file and no environment.
func Narrow(p sandbox.Policy, n Narrowing) (sandbox.Policy, error) {
	q := clonePolicy(p)
	l := LimitsOrDefault(q.Limits)
	if err := narrowResources(&l, n); err != nil {
		return sandbox.Policy{}, err
	}
	if n.Network != "" {
		if err := narrowNetwork(&q, n.Network); err != nil {
			return sandbox.Policy{}, err
		}
	}
	if err := narrowWorkspace(&l, q, n.WorkspaceBytes); err != nil {
		return sandbox.Policy{}, err
	}
	for _, m := range n.Mounts {
		if why := mountAllowed(q.MountRoots, m); why != "" {
			return sandbox.Policy{}, refusal("mounts", "%s", why)
		}
		m.FromRoot = true
		q.Mounts = append(q.Mounts, m)
	}
	q.Limits = l
	out, err := Normalize(q)
	if err != nil && len(n.Mounts) > 0 {
		// The limits and network were checked above: a requested
		// mount's target is refused (reserved, or taken).
		return sandbox.Policy{}, refusal("mounts", "%s", strings.TrimPrefix(err.Error(), "policy: "))
	}
	if err != nil {
		return sandbox.Policy{}, err
	}
	return out, nil
}

// refusal is a *NarrowError refusing field.
func refusal(field, format string, args ...any) error {
	return &NarrowError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// narrowResources lowers the limits l (the policy's, defaults filled in)
// to n's memory, CPUs, pids and timeout, refusing more than l allows.
func narrowResources(l *sandbox.Limits, n Narrowing) error {
	switch m := n.MemoryBytes; {
	case m == 0:
	case m < minMemoryBytes:
		return refusal("memoryBytes", "%s is below the minimum of %s", formatSize(m), formatSize(minMemoryBytes))
	case m > l.MemoryBytes:
		return refusal("memoryBytes", "%s is more than the policy's %s", formatSize(m), formatSize(l.MemoryBytes))
	default:
		l.MemoryBytes = m
	}
	switch c := n.CPUs; {
	case c == 0:
	case math.IsNaN(c) || c < minCPUs:
		return refusal("cpus", "%v is below the minimum of %v", c, minCPUs)
	case c > l.CPUs:
		return refusal("cpus", "%v is more than the policy's %v", c, l.CPUs)
	default:
		l.CPUs = c
	}
	switch k := n.Pids; {
	case k == 0:
	case k < 0:
		return refusal("pids", "%d is not allowed; want an integer from 1", k)
	case k > l.Pids:
		return refusal("pids", "%d is more than the policy's %d", k, l.Pids)
	default:
		l.Pids = k
	}
	switch t := n.TimeoutMs; {
	case t == 0:
	case t < 0:
		return refusal("timeoutMs", "%d is not allowed; want a positive duration", t)
	case t > l.MaxTimeoutMs:
		return refusal("timeoutMs", "%dms is more than the policy's maximum of %dms", t, l.MaxTimeoutMs)
	default:
		l.TimeoutMs = t
	}
	return nil
}

// narrowNetwork sets q's network to nw when it is no more than q's; a
// different mode drops q's allow and deny lists.
func narrowNetwork(q *sandbox.Policy, nw sandbox.NetworkMode) error {
	switch {
	case !nw.Valid():
		return refusal("network", "%q is not a network; want %s", nw, sandbox.JoinModes(sandbox.NetworkModes, " or "))
	case nw.Rank() > q.Network.Rank():
		return refusal("network", "%q is more than the policy's %q", nw, q.Network)
	}
	if nw != q.Network {
		q.NetworkAllow, q.NetworkDeny = nil, nil
	}
	q.Network = nw
	return nil
}

// narrowWorkspace bounds the workspace of q in l to w bytes (0: keep
// l's), which needs a policy that can bound it.
func narrowWorkspace(l *sandbox.Limits, q sandbox.Policy, w int64) error {
	switch {
	case w == 0:
	case w < 0:
		return refusal("workspaceBytes", "%d is not allowed; want a size > 0", w)
	case l.WorkspaceBytes > 0 && w > l.WorkspaceBytes:
		return refusal("workspaceBytes", "%s is more than the policy's %s", formatSize(w), formatSize(l.WorkspaceBytes))
	case q.Workspace != sandbox.WorkspaceRW || q.Backend == sandbox.BackendLocal:
		return refusal("workspaceBytes", "the policy's workspace %q on backend %s cannot be bounded (want workspace rw on a container backend)", q.Workspace, q.Backend)
	default:
		l.WorkspaceBytes = w
	}
	return nil
}

// imageTrees are the image's program, library and configuration
// directories. A mount a call asks for may not target them: over them it
// hides the shell the call runs with, or the passwd, hosts and resolver
// files the sandbox provides; below them the runtime cannot create the
// mount point (the host image shows them read-only).
var imageTrees = []string{"/bin", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/sbin", "/usr"}

// mountAllowed says why roots do not allow mount m, or "" when they do:
// its target must not lie in one of imageTrees; its source must be a
// clean absolute path at or below a root (compared as written:
// CheckMountSources and the backends resolve it without following links,
// so a link cannot lead out of the root), and a read-write mount needs a
// read-write root.
func mountAllowed(roots []sandbox.MountRoot, m sandbox.Mount) string {
	var ps problems
	if !checkAbsPath("source", m.Source, &ps) || !checkAbsPath("target", m.Target, &ps) {
		return strings.TrimPrefix(ps.err("mount").Error(), "mount: ")
	}
	for _, t := range imageTrees {
		if within(m.Target, t) {
			return fmt.Sprintf("target %s lies in %s, which holds the image's programs, libraries or configuration; mount elsewhere (for example below /mnt)", m.Target, t)
		}
	}
	if len(roots) == 0 {
		return fmt.Sprintf("%s: the policy has no mountRoots, so a call may not add mounts (add mountRoots to the policy file)", m.Source)
	}
	// The nearest (longest) root holding the source decides: a read-only
	// root nested in a read-write one keeps what lies in it read-only.
	var nearest *sandbox.MountRoot
	for i, r := range roots {
		if hostpath.Within(m.Source, r.Path) && (nearest == nil || len(r.Path) > len(nearest.Path)) {
			nearest = &roots[i]
		}
	}
	switch {
	case nearest == nil:
		var paths []string
		for _, r := range roots {
			paths = append(paths, r.Path)
		}
		return fmt.Sprintf("%s lies outside the policy's mountRoots (%s)", m.Source, strings.Join(paths, ", "))
	case !m.ReadOnly && nearest.ReadOnly:
		return fmt.Sprintf("%s: read-write, but mountRoots %s is read-only (mode ro); mount it read-only (:ro)", m.Source, nearest.Path)
	}
	return ""
}

// CheckMountSources resolves the source of each mount a call asks for
// (Narrowing.Mounts) without following links (hostpath.ResolvePath: a link
// in any component is refused, so a source below a root stays below it)
// and refuses one that is, holds or lies in a path of protected (what
// the service trusts, by name: the dsh home, the sessions root, the state
// directory, …; hostpath.CheckDeployment). A refusal is a *NarrowError
// for field "mounts". It reads the file system; safe for concurrent use.
// The backends resolve the sources again right before the mount
// (prepare.Paths).
func CheckMountSources(mounts []sandbox.Mount, protected map[string]string) error {
	for _, m := range mounts {
		src, err := hostpath.ResolvePath("source", m.Source)
		if err == nil {
			err = hostpath.CheckDeployment(src, protected)
		}
		if errors.Is(err, sandbox.ErrInvalid) {
			return &NarrowError{Field: "mounts", Reason: fmt.Sprintf("%s: %s", m.Source, strings.TrimPrefix(err.Error(), "sandbox: "))}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// ParseSize reads a byte count as a policy file writes sizes: digits with
// an optional unit Ki, Mi, Gi, Ti, k, M, G or T ("512Mi").
func ParseSize(s string) (int64, error) { return parseSize(s) }
