package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/request"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/childenv"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/prepare"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// Size limits of requests.
const (
	// MaxBodyBytes bounds a request body; a larger one is refused with 413.
	MaxBodyBytes = 1 << 20
	// MaxHeaderBytes bounds the HTTP header block.
	MaxHeaderBytes = 16 << 10
	// MaxCommandBytes bounds RunRequest.Command.
	MaxCommandBytes = 256 << 10
	// MaxCallIDBytes bounds RunRequest.CallID.
	MaxCallIDBytes = 128
	// MaxDSHEnvKeys bounds the entries of RunRequest.DSHEnv.
	MaxDSHEnvKeys = 64
	// MaxDSHEnvKeyBytes bounds one key of RunRequest.DSHEnv.
	MaxDSHEnvKeyBytes = 128
	// MaxDSHEnvValueBytes bounds one value of RunRequest.DSHEnv (a path
	// of PATH_MAX fits).
	MaxDSHEnvValueBytes = 4096
	// MaxSessionIDBytes bounds session.id: it names the session's
	// transcript directory, one file name (NAME_MAX).
	MaxSessionIDBytes = 255
	// MaxPathBytes bounds a path of a request (cwd, workdir, a mount's
	// source and target): PATH_MAX less its terminating NUL.
	MaxPathBytes = 4095
)

// DecodeRun strictly decodes and validates one RunRequest from r: exactly
// one JSON object, no unknown fields, a valid session header, and every
// field within its bounds. It does not check that the policy exists (the
// server does). Errors wrap sandbox.ErrInvalid and, where a field is to
// blame, are a *FieldError naming it. DecodeRun is safe for concurrent use.
func DecodeRun(r io.Reader) (*types.RunRequest, error) {
	var req types.RunRequest
	if err := decodeStrict(r, &req); err != nil {
		return nil, err
	}
	if err := validateRun(&req); err != nil {
		return nil, err
	}
	return &req, nil
}

// DecodeSession strictly decodes a SessionRequest from r; a NUL byte in
// any string of the header is refused naming the field.
func DecodeSession(r io.Reader) (*types.SessionRequest, error) {
	var req types.SessionRequest
	if err := decodeStrict(r, &req); err != nil {
		return nil, err
	}
	if err := headerText(req.Session); err != nil {
		return nil, err
	}
	return &req, nil
}

// headerText refuses a NUL byte in any string of a session header: no
// file name, environment value or label can hold one, so it would only
// fail later, deep in a backend.
func headerText(h *session.Header) error {
	if h == nil {
		return nil
	}
	for _, f := range []struct{ name, value string }{
		{"session.id", h.ID}, {"session.cwd", h.Cwd}, {"session.parentSession", h.ParentSession},
		{"session.origin", h.Origin}, {"session.agentPreset", h.AgentPreset},
	} {
		if strings.ContainsRune(f.value, 0) {
			return fieldErrorf(f.name, "contains a NUL byte")
		}
	}
	if len(h.ID) > MaxSessionIDBytes {
		return fieldErrorf("session.id", "is %d bytes, longer than %d (it names the session's transcript directory)", len(h.ID), MaxSessionIDBytes)
	}
	return checkPath("session.cwd", h.Cwd)
}

func decodeStrict(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err != nil && isMaxBytes(err) {
			return err
		}
		return fieldErrorf("body", "trailing data after the JSON object")
	}
	return nil
}

func isMaxBytes(err error) bool {
	return HTTPStatus(err) == 413
}

// decodeError names the field a json error is about.
func decodeError(err error) error {
	if isMaxBytes(err) {
		return err
	}
	var (
		typeErr *json.UnmarshalTypeError
		synErr  *json.SyntaxError
		fe      *session.FieldError
	)
	switch {
	case errors.As(err, &fe):
		return fieldErrorf("session."+fe.Field, "%s", fe.Reason)
	case strings.HasPrefix(err.Error(), "session header:"):
		field := "session"
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			field += "." + typeErr.Field
		}
		return fieldErrorf(field, "%s", strings.TrimPrefix(err.Error(), "session header: "))
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return fieldErrorf(field, "must be %s, not JSON %s", typeErr.Type, typeErr.Value)
	case errors.As(err, &synErr):
		return fieldErrorf("body", "malformed JSON at byte %d: %v", synErr.Offset, synErr)
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fieldErrorf("body", "empty or truncated JSON")
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fieldErrorf(strings.Trim(name, `"`), "unknown field")
	}
	return fieldErrorf("body", "%v", err)
}

// validateRun checks the form of a run request, one field after another
// in a fixed order; the first refused field is the one reported.
func validateRun(r *types.RunRequest) error {
	if err := headerText(r.Session); err != nil {
		return err
	}
	if r.StdinOpen && len(r.Stdin) > 0 {
		return fieldErrorf("stdinOpen", "not together with an inline stdin")
	}
	if r.Session != nil && r.Session.Cwd != "" && r.Cwd != "" {
		return fieldErrorf("cwd", "must be empty when session is set (the header's cwd applies)")
	}
	if err := absPath("cwd", r.Cwd); err != nil {
		return err
	}
	if err := checkPolicyName(r.Policy); err != nil {
		return err
	}
	if err := checkCommand(r.Command); err != nil {
		return err
	}
	if err := absPath("workdir", r.Workdir); err != nil {
		return err
	}
	if err := checkLimits(r); err != nil {
		return err
	}
	if err := checkEnv(r.Env); err != nil {
		return err
	}
	if err := checkMounts(r.Mounts); err != nil {
		return err
	}
	if err := checkCallID(r.CallID); err != nil {
		return err
	}
	return checkDSHEnv(r.DSHEnv)
}

// checkPolicyName refuses an empty policy name and one that is not
// short text without NUL.
func checkPolicyName(name string) error {
	if name == "" {
		return fieldErrorf("policy", "is required")
	}
	if len(name) > 256 || !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return fieldErrorf("policy", "is not a policy name")
	}
	return nil
}

// checkCommand refuses a blank command, one longer than MaxCommandBytes
// and one with a NUL byte.
func checkCommand(cmd string) error {
	switch {
	case strings.TrimSpace(cmd) == "":
		return fieldErrorf("command", "is required")
	case len(cmd) > MaxCommandBytes:
		return fieldErrorf("command", "is longer than %d bytes", MaxCommandBytes)
	case strings.ContainsRune(cmd, 0):
		return fieldErrorf("command", "contains a NUL byte")
	}
	return nil
}

// checkLimits refuses a negative timeout, memory, CPU (or NaN) or pids
// limit and a stdout tail outside 0–prepare.MaxTailBytes.
func checkLimits(r *types.RunRequest) error {
	if r.TimeoutMs < 0 {
		return fieldErrorf("timeoutMs", "must not be negative, got %d", r.TimeoutMs)
	}
	switch {
	case r.MemoryBytes < 0:
		return fieldErrorf("memoryBytes", "must not be negative, got %d", r.MemoryBytes)
	case r.CPUs < 0 || r.CPUs != r.CPUs:
		return fieldErrorf("cpus", "must not be negative, got %v", r.CPUs)
	case r.Pids < 0:
		return fieldErrorf("pids", "must not be negative, got %d", r.Pids)
	}
	if r.StdoutMaxBytes < 0 || r.StdoutMaxBytes > prepare.MaxTailBytes {
		return fieldErrorf("stdoutMaxBytes", "must be 0–%d, got %d", prepare.MaxTailBytes, r.StdoutMaxBytes)
	}
	return nil
}

// checkEnv refuses an env entry that is not NAME=VALUE, holds a NUL
// byte or sets a DSH_* name; errors name "env[i]".
func checkEnv(env []string) error {
	for i, kv := range env {
		field := fmt.Sprintf("env[%d]", i)
		name, _, ok := strings.Cut(kv, "=")
		switch {
		case !ok || name == "":
			return fieldErrorf(field, "is not NAME=VALUE")
		case strings.ContainsRune(kv, 0):
			return fieldErrorf(field, "%s: contains a NUL byte", name)
		case childenv.IsDSHName(name):
			return fieldErrorf(field, "%s: DSH_* variables come only from the service's snapshot", name)
		}
	}
	return nil
}

// checkMounts refuses a mount whose source or target no file system
// call can take (checkPath); errors name "mounts[i].source" or
// "mounts[i].target".
func checkMounts(mounts []sandbox.Mount) error {
	for i, m := range mounts {
		if err := checkPath(fmt.Sprintf("mounts[%d].source", i), m.Source); err != nil {
			return err
		}
		if err := checkPath(fmt.Sprintf("mounts[%d].target", i), m.Target); err != nil {
			return err
		}
	}
	return nil
}

// checkCallID refuses a call id longer than MaxCallIDBytes or that is
// not a line of text.
func checkCallID(id string) error {
	if len(id) > MaxCallIDBytes || !utf8.ValidString(id) || strings.ContainsAny(id, "\x00\n") {
		return fieldErrorf("callId", "must be at most %d bytes of text", MaxCallIDBytes)
	}
	return nil
}

// narrowed is pol narrowed by the request's per-call fields
// (request.Narrow); a refusal is a *FieldError naming the request's field.
// TimeoutMs is not part of it: the sandbox clamps it to the policy's
// maximum. Mount sources must also resolve without links and stay clear
// of the protected paths (policy.CheckMountSources).
func narrowed(r *types.RunRequest, pol sandbox.Policy, protected map[string]string) (sandbox.Policy, error) {
	n := policy.Narrowing{MemoryBytes: r.MemoryBytes, CPUs: r.CPUs, Pids: r.Pids, Network: sandbox.NetworkMode(r.Network), Mounts: r.Mounts}
	q, err := request.Narrow(pol, n, protected)
	var ne *policy.NarrowError
	if errors.As(err, &ne) {
		return sandbox.Policy{}, fieldErrorf(ne.Field, "%s", ne.Reason)
	}
	return q, err
}

// checkDSHEnv validates the form of a harness's DSH_* snapshot: the
// number of entries, each key's syntax (overlay.ValidKey) and each
// value's size and text. Whether the client may send a key is the
// server's decision (harnessEnv). Errors name "dshEnv.KEY"; a key that
// is not printable text is named by its position in sorted order, and a
// value never appears in a message.
func checkDSHEnv(env map[string]string) error {
	if len(env) > MaxDSHEnvKeys {
		return fieldErrorf("dshEnv", "has %d entries, more than %d", len(env), MaxDSHEnvKeys)
	}
	for i, k := range slices.Sorted(maps.Keys(env)) {
		if len(k) > MaxDSHEnvKeyBytes || !utf8.ValidString(k) || strings.ContainsFunc(k, func(r rune) bool { return !unicode.IsPrint(r) }) {
			return fieldErrorf(fmt.Sprintf("dshEnv[%d]", i), "key is not a DSH_* name")
		}
		field := "dshEnv." + k
		v := env[k]
		switch {
		case !overlay.ValidKey(k):
			return fieldErrorf(field, "is not a DSH_* name (%s followed by [A-Z][A-Z0-9_]*)", overlay.EnvPrefix)
		case strings.IndexByte(v, 0) >= 0:
			return fieldErrorf(field, "value contains a NUL byte")
		case len(v) > MaxDSHEnvValueBytes:
			return fieldErrorf(field, "value is longer than %d bytes", MaxDSHEnvValueBytes)
		}
	}
	return nil
}

func absPath(field, p string) error {
	switch {
	case p == "":
		return nil
	case strings.ContainsRune(p, 0):
		return fieldErrorf(field, "contains a NUL byte")
	case !filepath.IsAbs(p):
		return fieldErrorf(field, "%q is not an absolute path", p)
	}
	return checkPath(field, p)
}

// checkPath refuses a path no file system call can take: longer than
// MaxPathBytes, or with a component longer than a file name may be
// (NAME_MAX, 255 bytes). "" passes.
func checkPath(field, p string) error {
	if len(p) > MaxPathBytes {
		return fieldErrorf(field, "is %d bytes, longer than %d (PATH_MAX)", len(p), MaxPathBytes)
	}
	for c := range strings.SplitSeq(p, "/") {
		if len(c) > 255 {
			return fieldErrorf(field, "has a component of %d bytes, longer than 255 (NAME_MAX)", len(c))
		}
	}
	return nil
}
