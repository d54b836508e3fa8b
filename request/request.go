// Package request builds the sandbox.Request of a call one way for every
// front end: the CLI's exec, mcp and hooks run, and the service's
// handlers (api). A front end resolves the policy (a built-in or an
// operator's file for the CLI, a name it knows for the service) and
// checks what only it can (a client's scope, the command's form); Build
// narrows the policy, derives the session's view (its id, workspace and
// transcript directory from Locate), takes the DSH_* snapshot and sets
// the session directory's owner. The caller then fills in the command,
// its environment, stdin and limits.
//
// It may import sandbox, policy, session and persistence; cmd and api
// import it.
package request

import (
	"context"
	"path/filepath"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// Input is what a front end knows of a call before it is a request.
// Policy is required; every other zero field means "none".
type Input struct {
	// Policy is the resolved, normalized policy.
	Policy sandbox.Policy
	// Narrowing narrows Policy for this call (policy.Narrow); the zero
	// value narrows nothing. A refusal is a *policy.NarrowError, for the
	// front end to name its flag or field.
	Narrowing policy.Narrowing
	// Protected are the paths (by what they are) the mount sources of
	// Narrowing must stay clear of (policy.CheckMountSources).
	Protected map[string]string
	// Header is the call's session; nil for a call with no agent.
	Header *session.Header
	// Workspace is the session's workspace (the cwd), mounted as
	// Policy.Workspace says; "" for none. The front end resolves and
	// checks it.
	Workspace string
	// Locator locates Header's transcript: when it gives a local JSONL
	// file, the file's directory is the session's TranscriptDir. nil: no
	// transcript.
	Locator persistence.Locator
	// CheckTranscript, when set, vets the located transcript path before
	// its directory is used; its error fails Build as it is.
	CheckTranscript func(path string) error
	// Snapshot returns the call's DSH_* snapshot (KEY=VALUE); nil means
	// none (hooks get none). Its error fails Build as it is.
	Snapshot func(ctx context.Context) ([]string, error)
	// Owner owns the session directory; the zero value leaves it to the
	// executor.
	Owner sandbox.Owner
}

// Build returns the request of in: its narrowed policy, DSH_* snapshot
// and session. The caller sets the command and the rest.
func Build(ctx context.Context, in Input) (*sandbox.Request, error) {
	pol, err := Narrow(in.Policy, in.Narrowing, in.Protected)
	if err != nil {
		return nil, err
	}
	sess, err := Session(in.Header, in.Workspace, in.Locator, in.CheckTranscript)
	if err != nil {
		return nil, err
	}
	sess.Owner = in.Owner
	req := &sandbox.Request{Policy: pol, Session: sess}
	if in.Snapshot != nil {
		if req.DSHEnv, err = in.Snapshot(ctx); err != nil {
			return nil, err
		}
	}
	return req, nil
}

// Narrow is p narrowed by n (policy.Narrow), whose mount sources must
// also resolve without links and stay clear of protected
// (policy.CheckMountSources). A refusal is a *policy.NarrowError; an n
// that narrows nothing returns p as it is.
func Narrow(p sandbox.Policy, n policy.Narrowing, protected map[string]string) (sandbox.Policy, error) {
	if n.MemoryBytes == 0 && n.CPUs == 0 && n.Pids == 0 && n.TimeoutMs == 0 && n.Network == "" && n.WorkspaceBytes == 0 && len(n.Mounts) == 0 {
		return p, nil
	}
	q, err := policy.Narrow(p, n)
	if err == nil {
		err = policy.CheckMountSources(n.Mounts, protected)
	}
	if err != nil {
		return sandbox.Policy{}, err
	}
	return q, nil
}

// Session is the sandbox view of a call's session: h's id, the
// workspace, and the directory of the local JSONL transcript loc gives
// for h (vetted by check, when set). h nil is a call with no agent.
func Session(h *session.Header, workspace string, loc persistence.Locator, check func(path string) error) (sandbox.Session, error) {
	sess := sandbox.Session{Cwd: workspace}
	if h == nil {
		return sess, nil
	}
	sess.ID = h.ID
	if loc == nil {
		return sess, nil
	}
	l, ok := loc.Locate(*h)
	if !ok || l.Kind != persistence.KindJSONL || l.Path == "" {
		return sess, nil
	}
	if check != nil {
		if err := check(l.Path); err != nil {
			return sandbox.Session{}, err
		}
	}
	sess.TranscriptDir = filepath.Dir(l.Path)
	return sess, nil
}
