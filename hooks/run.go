package hooks

import (
	"context"
	"os"
	"sync"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/redact"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/secrets"
)

// Runner runs one command in the sandbox; every sandbox.Executor is one.
type Runner interface {
	Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error)
}

// RunOptions configure Dispatch.Run. Runner and Policy are required.
type RunOptions struct {
	// Runner runs each hook command.
	Runner Runner
	// Policy confines every hook command. It is the operator's (a flag or
	// the service's configuration), never one a hook configuration names;
	// the caller adds File.WithMounts to it.
	Policy sandbox.Policy
	// Session is the hooks' session as request.Build makes it for the
	// event's: its id, its workspace (the hooks' working directory), its
	// transcript directory (mounted read-only so that hooks can read
	// transcript_path, when it exists) and its owner. The zero value is a
	// call with no agent and no workspace.
	Session sandbox.Session
	// StdoutMaxBytes is the tail of each output stream kept per hook;
	// 0 means the policy's (default 64 000). Whatever a hook prints,
	// memory stays bounded by it.
	StdoutMaxBytes int
	// Detector is the pattern detector that also redacts the payload
	// when Policy sets RedactDetectors, the one the Runner redacts the
	// hooks' output with (secrets.Redactor); nil means none, and then
	// under such a policy no hook runs: each result fails with
	// secrets.CheckDetector's error, naming redact.detectors.
	Detector redact.Detector
}

// Run runs every invocation of p concurrently, each through o.Runner in
// its own container, with p.Stdin as stdin (its secrets redacted as the
// call's output is: secrets.Redactor of o.Policy; when a redact file
// cannot be read, or o.Policy sets RedactDetectors and o.Detector is
// nil, no hook runs and each result fails closed), p.Env as ordinary env, no
// DSH_* snapshot, the session cwd as working directory and the hook's
// timeout. The transcript directory is mounted read-only only when it
// exists already, so running hooks never creates a session. It waits for all of them and returns their merged outcome; a
// hook that fails is a non-blocking error in its HookResult, never an
// error of Run. Run returns an error only for a missing Runner.
func (p *Dispatch) Run(ctx context.Context, o RunOptions) (*Outcome, error) {
	if o.Runner == nil {
		return nil, invalid("hooks: RunOptions.Runner is nil")
	}
	sess := o.Session
	if sess.TranscriptDir != "" {
		// Hooks only read the transcript: when its directory does not
		// exist yet there is nothing to read, and mounting it would create
		// it, materializing the session.
		if fi, err := os.Stat(sess.TranscriptDir); err != nil || !fi.IsDir() {
			sess.TranscriptDir = ""
		}
	}
	// The payload loses the secrets the hook's output would lose
	// (secrets.Redactor); when they cannot be known, no hook runs.
	redactor, redactErr := secrets.Redactor(o.Policy, os.Environ(), os.LookupEnv, o.Detector)
	stdin := redactor.Bytes(p.Stdin)
	results := make([]HookResult, len(p.Invocations))
	var wg sync.WaitGroup
	for i, inv := range p.Invocations {
		if redactErr != nil {
			results[i] = Decode(p.Event.Name, nil, redactErr)
			results[i].Command, results[i].Place = inv.Command, inv.Place
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := &sandbox.Request{
				Command:        inv.Command,
				TimeoutMs:      max(inv.Timeout.Milliseconds(), 1),
				StdoutMaxBytes: o.StdoutMaxBytes,
				Stdin:          stdin,
				Env:            p.Env,
				Session:        sess,
				Policy:         o.Policy,
			}
			start := time.Now()
			res, err := o.Runner.Run(ctx, req)
			hr := Decode(p.Event.Name, res, err)
			hr.Command, hr.Place = inv.Command, inv.Place
			hr.Duration = time.Since(start)
			results[i] = hr
		}()
	}
	wg.Wait()
	return Merge(results), nil
}
