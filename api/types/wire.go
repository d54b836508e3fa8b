// Package types holds the wire types of the dsh-sandbox service's /v1
// API (api/openapi.yaml): request and response bodies, NDJSON events,
// error bodies and their classes, and the service address format. The
// server (package api) and its Go client (api/client) both use them; this
// package imports only the standard library and the light sandbox,
// session and persistence packages, so a harness that embeds the client
// links no server code (a test in api/client asserts it).
package types

import (
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// RunRequest is the body of POST /v1/run and POST /v1/jobs. It names the
// session and the policy; the service builds the DSH_* snapshot itself
// and only checks the harness's copy of it (DSHEnv, DESIGN §3.12). Any
// unknown field is refused.
type RunRequest struct {
	// Session is the header of the agent session making the call; nil is
	// a call with no agent. It is validated as dsh validates a header
	// line (type "session", version 0, non-empty id, absolute cwd).
	Session *session.Header `json:"session,omitempty"`
	// Cwd is the working directory of a call with no agent (absolute);
	// it must be empty when Session is set (the header's cwd applies).
	Cwd string `json:"cwd,omitempty"`
	// Policy names a policy the service knows (required).
	Policy string `json:"policy"`
	// Command is run as `bash -c Command` (required).
	Command string `json:"command"`
	// Workdir is the absolute working directory; empty means the
	// session cwd when the workspace is mounted, else /tmp.
	Workdir string `json:"workdir,omitempty"`
	// TimeoutMs bounds the call; 0 means the policy's; negative is refused;
	// a larger one than the policy's maximum is clamped to it (harnesses
	// forward a model's timeout).
	TimeoutMs int64 `json:"timeoutMs,omitempty"`
	// MemoryBytes, CPUs, Pids and Network narrow the policy for this call
	// (policy.Narrow): 0 or empty keeps the policy's value; asking more
	// than the policy allows is refused (400 naming the field).
	MemoryBytes int64   `json:"memoryBytes,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	Pids        int64   `json:"pids,omitempty"`
	// Network is "none", "loopback" (under a loopback or allowlist
	// policy) or "allowlist" (under an allowlist policy, keeping its
	// lists); empty keeps the policy's.
	Network string `json:"network,omitempty"`
	// Mounts are extra bind mounts, each below one of the policy's
	// mountRoots (policy.Narrow, policy.CheckMountSources); anything
	// else is refused (400 naming "mounts").
	Mounts []sandbox.Mount `json:"mounts,omitempty"`
	// StdoutMaxBytes is the tail kept per stream; 0 means the policy's.
	StdoutMaxBytes int `json:"stdoutMaxBytes,omitempty"`
	// Env is ordinary KEY=VALUE environment; DSH_* names are refused.
	Env []string `json:"env,omitempty"`
	// Stdin is fed to the command (base64 in JSON); nil means empty. It
	// counts against the body's bound (api.MaxBodyBytes); a larger stdin
	// of a foreground run streams as the "stdin" part of a
	// multipart/form-data body instead.
	Stdin []byte `json:"stdin,omitempty"`
	// StdinOpen, for POST /v1/jobs only, keeps the job's stdin open for
	// POST /v1/jobs/{id}/stdin until a write closes it; false gives the
	// job Stdin (or an empty stdin).
	StdinOpen bool `json:"stdinOpen,omitempty"`
	// DSHEnv is the harness's own DSH_* snapshot of the call (dsh's
	// dshEnv), KEY → value; nil means the harness sent none. The service
	// never takes a built-in key from it: DSH_HOME, DSH_SHELL,
	// DSH_SESSION_ID, DSH_SESSION_JSONL and every key the service's own
	// registry declares must equal the service's snapshot, present or
	// absent alike, or the request is refused (403 naming
	// "dshEnv.KEY"). Other keys are accepted only from a harness client
	// (api.Client.Harness) and are added to the snapshot, which is applied
	// last. Keys are DSH_[A-Z][A-Z0-9_]*; at most api.MaxDSHEnvKeys entries,
	// values NUL-free and at most api.MaxDSHEnvValueBytes.
	DSHEnv map[string]string `json:"dshEnv,omitempty"`
	// CallID is the caller's id for the call (a tool-use id), recorded
	// in the audit log; at most 128 bytes. The service makes its own
	// execution id.
	CallID string `json:"callId,omitempty"`
	// Stream asks POST /v1/run for an NDJSON stream of Events instead of
	// one RunResponse.
	Stream bool `json:"stream,omitempty"`
}

// SessionRequest is the body of POST /v1/snapshot and POST /v1/locate.
type SessionRequest struct {
	// Session is the agent session; nil means a call with no agent
	// (locate refuses it).
	Session *session.Header `json:"session,omitempty"`
}

// RunResponse is the answer of a non-streaming POST /v1/run.
type RunResponse struct {
	// ExecutionID is the service's id of the call (labels, spill files,
	// audit log).
	ExecutionID string `json:"executionId"`
	// Result is the outcome of the call.
	Result *sandbox.Result `json:"result"`
	// Rendered is render.Result(Result), the model-facing text.
	Rendered string `json:"rendered"`
}

// Event types of an NDJSON stream.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventResult = "result"
	EventError  = "error"
)

// Event is one line of a streaming POST /v1/run: output chunks as they are
// produced, then exactly one "result" or "error" event.
type Event struct {
	// Type is EventStdout, EventStderr, EventResult or EventError.
	Type string `json:"type"`
	// Data is a chunk of output (base64 in JSON) for stdout/stderr.
	Data []byte `json:"data,omitempty"`
	// ExecutionID, Result and Rendered are set on the result event.
	ExecutionID string          `json:"executionId,omitempty"`
	Result      *sandbox.Result `json:"result,omitempty"`
	Rendered    string          `json:"rendered,omitempty"`
	// Error is set on the error event.
	Error *ErrorBody `json:"error,omitempty"`
}

// StartResponse is the answer of POST /v1/jobs.
type StartResponse struct {
	ID string `json:"id"`
}

// StdinResponse is the answer of POST /v1/jobs/{id}/stdin.
type StdinResponse struct {
	ID string `json:"id"`
	// Written is how many bytes of the request body the job's stdin took.
	Written int64 `json:"written"`
	// Closed says the job's stdin is closed now: by this or an earlier
	// request, because the job ended, or because the bound was passed.
	Closed bool `json:"closed"`
}

// JobsResponse is the answer of GET /v1/jobs.
type JobsResponse struct {
	Jobs []sandbox.JobInfo `json:"jobs"`
}

// DeclarationsResponse is the answer of GET /v1/env.
type DeclarationsResponse struct {
	Declarations []Declaration `json:"declarations"`
}

// Declaration is one declared DSH_* key.
type Declaration struct {
	Key         string `json:"key"`
	Owner       string `json:"owner"`
	Description string `json:"description"`
	BuiltIn     bool   `json:"builtIn"`
}

// SnapshotResponse is the answer of POST /v1/snapshot: the DSH_* snapshot
// a call of the session would get now, sorted KEY=VALUE. `env show
// --json` prints the same.
type SnapshotResponse struct {
	Env []string `json:"env"`
}

// LocateResponse is the answer of POST /v1/locate; Location is nil when
// the store has no per-session local file.
type LocateResponse struct {
	Location *persistence.Location `json:"location"`
}

// HealthResponse is the answer of GET /v1/health.
type HealthResponse struct {
	Status string `json:"status"`
}

// ErrorBody is the JSON body of every error answer, {"error": {…}}.
type ErrorBody struct {
	// Class is "invalid", "forbidden", "not_found", "unavailable",
	// "unauthorized", "overloaded", "method_not_allowed" or "internal".
	Class string `json:"class"`
	// Field names the offending request field, when one is to blame.
	Field string `json:"field,omitempty"`
	// Message says what is wrong; it never contains env values.
	Message string `json:"message"`
}

// ErrorResponse wraps an ErrorBody.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// JobOutputResponse is the answer of GET /v1/jobs/{id}: the output since
// the previous read and, once the job has ended, its result or error.
type JobOutputResponse struct {
	sandbox.JobOutput
	Error *ErrorBody `json:"error,omitempty"`
}

// Kinds of CallInfo.
const (
	CallKindRun = "run" // a foreground call (POST /v1/run)
	CallKindJob = "job" // a background job (POST /v1/jobs)
)

// States of CallInfo.
const (
	CallQueued  = "queued"  // waiting for a slot
	CallRunning = "running" // executing
)

// CallInfo is one execution that has not ended, as GET /v1/calls lists
// it. It carries no command text and no environment.
type CallInfo struct {
	// ID is the execution id (a run's executionId); DELETE
	// /v1/calls/{id} cancels it.
	ID string `json:"id"`
	// Kind is "run" or "job".
	Kind string `json:"kind"`
	// JobID is a background job's id (GET /v1/jobs/{id}); empty for runs.
	JobID string `json:"jobId,omitempty"`
	// SessionID is the call's session ("" for a call with no agent).
	SessionID string `json:"sessionId"`
	Policy    string `json:"policy"`
	Backend   string `json:"backend"`
	// State is "queued" or "running".
	State   string    `json:"state"`
	Started time.Time `json:"started"`
}

// CallsResponse is the answer of GET /v1/calls.
type CallsResponse struct {
	Calls []CallInfo `json:"calls"`
}
