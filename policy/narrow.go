package policy

import (
	"fmt"
	"math"
	"strings"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
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
	// Network is "none" (always allowed) or "loopback" (only when the
	// policy's network is loopback).
	Network string `json:"network,omitempty"`
	// Mounts are extra bind mounts the call asks for. A policy names no
	// roots a call may mount from, so any mount is refused: an operator
	// adds mounts in the policy file.
	Mounts []sandbox.Mount `json:"mounts,omitempty"`
}

// NarrowError is a refused Narrowing; Field is the Narrowing field's JSON
// name ("memoryBytes", "cpus", "pids", "timeoutMs", "network",
// "mounts"), for callers that name their own flag or field. It wraps
// sandbox.ErrInvalid.
type NarrowError struct {
	Field  string
	Reason string
}

func (e *NarrowError) Error() string { return "policy: " + e.Field + ": " + e.Reason }

// Unwrap makes a NarrowError an invalid-argument error (exit code 2, 400).
func (e *NarrowError) Unwrap() error { return sandbox.ErrInvalid }

// networkRank orders networks by what they allow.
var networkRank = map[string]int{"none": 0, "loopback": 1}

// Narrow returns p tightened by n, normalized and digested again (its
// name is kept). A field asking more than p allows, or an invalid value,
// is refused with a *NarrowError naming the field; the first refused
// field in the order of Narrowing is reported. p is not modified. It is a
// pure function: it reads no file and no environment.
func Narrow(p sandbox.Policy, n Narrowing) (sandbox.Policy, error) {
	q := clonePolicy(p)
	l := defaultLimits(q.Limits)
	refuse := func(field, format string, args ...any) (sandbox.Policy, error) {
		return sandbox.Policy{}, &NarrowError{Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	switch m := n.MemoryBytes; {
	case m == 0:
	case m < minMemoryBytes:
		return refuse("memoryBytes", "%s is below the minimum of %s", formatSize(m), formatSize(minMemoryBytes))
	case m > l.MemoryBytes:
		return refuse("memoryBytes", "%s is more than the policy's %s", formatSize(m), formatSize(l.MemoryBytes))
	default:
		l.MemoryBytes = m
	}
	switch c := n.CPUs; {
	case c == 0:
	case math.IsNaN(c) || c < minCPUs:
		return refuse("cpus", "%v is below the minimum of %v", c, minCPUs)
	case c > l.CPUs:
		return refuse("cpus", "%v is more than the policy's %v", c, l.CPUs)
	default:
		l.CPUs = c
	}
	switch k := n.Pids; {
	case k == 0:
	case k < 0:
		return refuse("pids", "%d is not allowed; want an integer from 1", k)
	case k > l.Pids:
		return refuse("pids", "%d is more than the policy's %d", k, l.Pids)
	default:
		l.Pids = k
	}
	switch t := n.TimeoutMs; {
	case t == 0:
	case t < 0:
		return refuse("timeoutMs", "%d is not allowed; want a positive duration", t)
	case t > l.MaxTimeoutMs:
		return refuse("timeoutMs", "%dms is more than the policy's maximum of %dms", t, l.MaxTimeoutMs)
	default:
		l.TimeoutMs = t
	}
	if n.Network != "" {
		want, ok := networkRank[n.Network]
		switch {
		case !ok:
			return refuse("network", "%q is not a network; want %s", n.Network, strings.Join(networks, " or "))
		case want > networkRank[q.Network]:
			return refuse("network", "%q is more than the policy's %q", n.Network, q.Network)
		}
		q.Network = n.Network
	}
	if len(n.Mounts) > 0 {
		return refuse("mounts", "%s: the policy names no roots a call may mount from; add the mount to the policy file instead", n.Mounts[0].Source)
	}
	q.Limits = l
	out, err := Normalize(q)
	if err != nil {
		return sandbox.Policy{}, err
	}
	return out, nil
}

// ParseSize reads a byte count as a policy file writes sizes: digits with
// an optional unit Ki, Mi, Gi, Ti, k, M, G or T ("512Mi").
func ParseSize(s string) (int64, error) { return parseSize(s) }
