package sandbox

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The enumerated settings of a Policy are named string types: each is
// spelled in policy files, JSON and digests exactly as its constant's
// value, is checked once where it enters (policy.Validate, with its Valid
// method) and is compared through its methods rather than as a literal
// string.

// WorkspaceMode says whether and how a call sees its session's workspace
// (Session.Cwd), at the same path. The zero value is not valid.
type WorkspaceMode string

// Workspace modes.
const (
	WorkspaceRW   WorkspaceMode = "rw"
	WorkspaceRO   WorkspaceMode = "ro"
	WorkspaceNone WorkspaceMode = "none"
)

// WorkspaceModes are the valid workspace modes, in the order messages
// list them.
var WorkspaceModes = []WorkspaceMode{WorkspaceRW, WorkspaceRO, WorkspaceNone}

// Valid reports whether m is one of WorkspaceModes.
func (m WorkspaceMode) Valid() bool { return slices.Contains(WorkspaceModes, m) }

// Mounted reports whether m mounts the workspace (read-write or
// read-only).
func (m WorkspaceMode) Mounted() bool { return m == WorkspaceRW || m == WorkspaceRO }

// Writable reports whether m mounts the workspace read-write.
func (m WorkspaceMode) Writable() bool { return m == WorkspaceRW }

// TranscriptMode says whether a call sees its session directory
// (Session.TranscriptDir), read-only at the same path. The zero value is
// not valid.
type TranscriptMode string

// Transcript modes.
const (
	TranscriptRO   TranscriptMode = "ro"
	TranscriptNone TranscriptMode = "none"
)

// TranscriptModes are the valid transcript modes.
var TranscriptModes = []TranscriptMode{TranscriptRO, TranscriptNone}

// Valid reports whether m is one of TranscriptModes.
func (m TranscriptMode) Valid() bool { return slices.Contains(TranscriptModes, m) }

// Mounted reports whether m mounts the session directory (read-only).
func (m TranscriptMode) Mounted() bool { return m == TranscriptRO }

// NetworkMode is the network a call has. The zero value is not valid.
type NetworkMode string

// Network modes: none and loopback both give only the lo interface;
// allowlist gives lo plus an egress proxy and a DNS server on it that
// reach the hosts of Policy.NetworkAllow.
const (
	NetworkNone      NetworkMode = "none"
	NetworkLoopback  NetworkMode = "loopback"
	NetworkAllowlist NetworkMode = "allowlist"
)

// NetworkModes are the valid network modes, from the least to the most
// they allow.
var NetworkModes = []NetworkMode{NetworkNone, NetworkLoopback, NetworkAllowlist}

// Valid reports whether m is one of NetworkModes.
func (m NetworkMode) Valid() bool { return slices.Contains(NetworkModes, m) }

// Rank orders network modes by what they allow: 0 for none, 1 for
// loopback, 2 for allowlist; -1 for an invalid mode.
func (m NetworkMode) Rank() int { return slices.Index(NetworkModes, m) }

// Backend names the backend that runs a call. The zero value is not
// valid. Which names are backends is the program's choice: a policy may
// name the backends of the registry the program builds (sandbox/backend,
// cmd/dsh-sandbox's builtins.go), which policy.FileChecks.Backends passes
// to a policy file's validation, and an executor is only ever resolved
// from that registry.
type Backend string

// The backends this module names here; a backend may also name itself
// (kubernetes.Backend).
const (
	BackendOCI        Backend = "oci"
	BackendDocker     Backend = "docker"
	BackendContainerd Backend = "containerd"
	BackendLocal      Backend = "local"
)

// Runtime names the OCI runtime of the backends that use one. The zero
// value means the default, RuntimeRunc, where a policy is normalized.
type Runtime string

// Runtimes.
const (
	RuntimeRunc  Runtime = "runc"
	RuntimeCrun  Runtime = "crun"
	RuntimeRunsc Runtime = "runsc"
)

// Runtimes are the valid runtimes, in the order messages list them.
var Runtimes = []Runtime{RuntimeRunc, RuntimeCrun, RuntimeRunsc}

// Valid reports whether r is one of Runtimes.
func (r Runtime) Valid() bool { return slices.Contains(Runtimes, r) }

// User is the policy's user: UserAuto, UserHostRoot or "uid:gid" with
// decimal ids (policy.ResolveUser reads it). The zero value is not valid.
type User string

// Users with a name.
const (
	// UserAuto runs a call as the owner of its workspace (see
	// policy.ResolveUser).
	UserAuto User = "auto"
	// UserHostRoot runs a call as host uid 0:0 without a user namespace.
	UserHostRoot User = "host-root"
)

// IDs reads u: UserAuto (auto is true), UserHostRoot (0:0) or "uid:gid"
// with decimal ids below 4294967295 (which means "no id" to the kernel).
// Anything else is an error (not classified; policy validation names the
// field).
func (u User) IDs() (uid, gid uint32, auto bool, err error) {
	switch u {
	case UserAuto:
		return 0, 0, true, nil
	case UserHostRoot:
		return 0, 0, false, nil
	}
	us, gs, ok := strings.Cut(string(u), ":")
	uid, uerr := parseID(us)
	gid, gerr := parseID(gs)
	if !ok || uerr != nil || gerr != nil {
		return 0, 0, false, fmt.Errorf("%q is not allowed; want \"auto\" or \"uid:gid\" with numeric ids, e.g. \"1000:1000\" (or \"host-root\")", string(u))
	}
	return uid, gid, false, nil
}

// Valid reports whether u reads as a user (IDs).
func (u User) Valid() bool {
	_, _, _, err := u.IDs()
	return err == nil
}

// parseID reads a decimal id below 4294967295.
func parseID(s string) (uint32, error) {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a decimal id", s)
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == math.MaxUint32 {
		return 0, fmt.Errorf("%q is out of range", s)
	}
	return uint32(n), nil
}

// Auto reports whether u is UserAuto.
func (u User) Auto() bool { return u == UserAuto }

// HostRoot reports whether u is UserHostRoot.
func (u User) HostRoot() bool { return u == UserHostRoot }

// JoinModes lists modes separated by sep, for messages: "rw, ro, none".
func JoinModes[T ~string](modes []T, sep string) string {
	s := make([]string, len(modes))
	for i, m := range modes {
		s[i] = string(m)
	}
	return strings.Join(s, sep)
}

// PullMode says when an image is pulled from its registry (policy pull).
type PullMode string

// Pull modes. The zero value means PullMissing.
const (
	// PullNever runs only images the backend already has.
	PullNever PullMode = "never"
	// PullMissing pulls an image the backend does not have (or, under a
	// verify policy, has without a verified signature by its keys).
	PullMissing PullMode = "missing"
	// PullAlways pulls before every call, so a tag's newest image runs.
	PullAlways PullMode = "always"
)

// PullModes are the valid pull modes.
var PullModes = []PullMode{PullNever, PullMissing, PullAlways}

// Or returns m, or PullMissing when m is empty.
func (m PullMode) Or() PullMode {
	if m == "" {
		return PullMissing
	}
	return m
}
