// Package mcpserver exposes the sandbox executor to agents that speak the
// Model Context Protocol (Claude Code, Codex, Cursor, any MCP client): the
// tools bash (foreground or background), job_output and job_kill, served
// with the official Go SDK. Every call runs through a sandbox.Executor
// that the caller built; the session identity, the DSH_* snapshot and the
// policy are the operator's (fixed when the server is made), never the
// model's, and the model can pass neither environment nor stdin.
// Foreground results are rendered as dsh's bash tool renders them
// (render.Result, DESIGN §3.7).
//
// It may import sandbox, overlay, contributors, persistence, session and
// policy, never a backend: cmd/dsh-sandbox wires the executor in.
package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/jobs"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/render"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/childenv"
)

// Tool names.
const (
	ToolBash      = "bash"
	ToolJobOutput = "job_output"
	ToolJobKill   = "job_kill"
)

// DefaultKillWait bounds how long job_kill, and Close for all jobs, wait
// for a job's container to be gone (SIGTERM, the grace, SIGKILL,
// teardown).
const DefaultKillWait = 30 * time.Second

// jobOwner is the owner of every job in jobs.Runner: one server serves
// one client over stdio, so all its jobs are that client's.
const jobOwner = "mcp"

// Options configure a Server.
type Options struct {
	// Executor runs every call; required.
	Executor sandbox.Executor
	// Policy is the resolved policy that confines every call; required
	// (policy.Normalize's output).
	Policy sandbox.Policy
	// Session is the agent session of every call; the zero value is a
	// call with no agent. Its Cwd is the default working directory.
	Session sandbox.Session
	// Snapshot returns the trusted DSH_* snapshot (sorted KEY=VALUE) for
	// one call; it is asked once per call, so a value that changes (a
	// transcript that now exists) is current. Nil means no DSH_*
	// variables.
	Snapshot func(context.Context) ([]string, error)
	// Env is ordinary environment from the operator (DESIGN §3.6 layer
	// 4) as KEY=VALUE; nil means none. Models never add to it.
	Env []string
	// Jobs holds background calls; nil means a Jobs of its own on
	// Executor with MaxLiveJobs and JobTTL.
	Jobs *jobs.Runner
	// MaxLiveJobs bounds background jobs that have not ended; 0 means no
	// bound. Ignored when Jobs is set.
	MaxLiveJobs int
	// JobTTL is how long an ended job stays readable; 0 keeps it until
	// the server ends. Ignored when Jobs is set.
	JobTTL time.Duration
	// Name and Version identify the server to clients; empty means
	// "dsh-sandbox" and "dev".
	Name, Version string
	// Logger receives one debug event per call (names only, never
	// environment values or output) and warnings; the zero value logs
	// nothing.
	Logger zerolog.Logger
}

// Server is an MCP server with the bash, job_output and job_kill tools.
// Create it with New. It is safe for concurrent use: the SDK runs calls
// concurrently, and each call has its own container.
type Server struct {
	opts Options
	jobs *jobs.Runner
	mcp  *mcp.Server
}

// New validates opts and returns a Server with its tools registered.
func New(opts Options) (*Server, error) {
	if opts.Executor == nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "mcpserver: Options.Executor is nil")
	}
	if opts.Policy.Backend == "" {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "mcpserver: Options.Policy has no backend (not a resolved policy)")
	}
	for i, kv := range opts.Env {
		name, _, ok := strings.Cut(kv, "=")
		if !ok || name == "" || childenv.IsDSHName(name) || strings.ContainsRune(kv, 0) {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "mcpserver: Options.Env[%d] (%q) is not NAME=VALUE with an ordinary name and no NUL byte", i, name)
		}
	}
	if opts.Name == "" {
		opts.Name = "dsh-sandbox"
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	s := &Server{opts: opts, jobs: opts.Jobs}
	if s.jobs == nil {
		s.jobs = jobs.NewWith(opts.Executor, jobs.Options{MaxLivePerOwner: opts.MaxLiveJobs, TTL: opts.JobTTL})
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: opts.Name, Title: "dsh-sandbox", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "Shell commands run in a fresh, short-lived container per call (policy " + opts.Policy.Name + "). " +
			"Use bash for commands; with run_in_background it returns a job id at once: read new output with job_output, stop it with job_kill.",
	})
	bashSchema, err := bashInputSchema()
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInternal, "mcpserver: bash input schema: %v", err)
	}
	mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolBash, Title: "Run a bash command in the sandbox", Description: bashDescription, InputSchema: bashSchema}, s.bash)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolJobOutput, Title: "Read a background job's new output", Description: jobOutputDescription}, s.jobOutput)
	mcp.AddTool(s.mcp, &mcp.Tool{Name: ToolJobKill, Title: "Stop a background job", Description: jobKillDescription}, s.jobKill)
	return s, nil
}

// MCP returns the SDK server, to run on any transport (tests use an
// in-memory pair).
func (s *Server) MCP() *mcp.Server { return s.mcp }

// Run serves one client on t until the client disconnects or ctx ends,
// then stops every background job (Close).
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	err := s.mcp.Run(ctx, t)
	if cerr := s.Close(ctx); cerr != nil && err == nil {
		err = cerr
	}
	return err
}

// Close kills every background job and waits up to DefaultKillWait for
// their containers to be gone, even when ctx has ended.
func (s *Server) Close(ctx context.Context) error {
	kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultKillWait)
	defer cancel()
	return s.jobs.KillAll(kctx)
}

const bashDescription = `Runs a bash command line (bash -c) in a fresh, short-lived sandbox container and returns its output.

The workspace (the session's working directory) is mounted at its own path as the operator's policy allows; the session's transcript directory is readable at the path $DSH_SESSION_JSONL names. The environment is fixed by the operator: DSH_HOME, DSH_SHELL, DSH_SESSION_ID and DSH_SESSION_JSONL describe the current session. There is no network unless the policy allows it, and nothing persists outside the mounted directories between calls.

Output: stdout, then "[stderr]" and stderr; "(no output)" when both are empty. Each stream keeps its last 64000 bytes; when more was produced, "[output truncated; full output: PATH]" names a file with everything. Then "[timed out after Nms]", "[killed by signal: SIG]" or "[exit code: N]" when the command did not succeed.

timeout is in milliseconds (default 120000, at most the policy's maximum, 600000 by default). With run_in_background the command starts at once and the result is its job id: read its new output with job_output and stop it with job_kill.`

const jobOutputDescription = `Returns the output a background bash job produced since the previous job_output of that job, and, once the job has ended, how it ended ("[exit code: N]", "[killed by signal: SIG]", ...). While it runs the last line is "[running]".`

const jobKillDescription = `Stops a background bash job (SIGTERM to every process of its container, SIGKILL after a grace period), waits until its container is gone, and returns its remaining output and how it ended. Killing a job that has already ended is not an error.`

// BashInput are the arguments of the bash tool.
type BashInput struct {
	Command         string `json:"command" jsonschema:"the command line, run as bash -c COMMAND"`
	Timeout         *int64 `json:"timeout,omitempty" jsonschema:"timeout in milliseconds, greater than 0 (default 120000; clamped to the policy's maximum)"`
	Workdir         string `json:"workdir,omitempty" jsonschema:"absolute working directory inside the sandbox (default: the session's working directory)"`
	RunInBackground bool   `json:"run_in_background,omitempty" jsonschema:"start the command and return a job id at once; read its output with job_output, stop it with job_kill"`
}

// bashInputSchema is BashInput's inferred schema with timeout a plain
// positive integer: the inference makes the optional *int64 ["null",
// "integer"], which clients that map schemas onto a single-type dialect
// reject.
func bashInputSchema() (*jsonschema.Schema, error) {
	schema, err := jsonschema.For[BashInput](nil)
	if err != nil {
		return nil, err
	}
	p := schema.Properties["timeout"]
	if p == nil {
		return nil, fmt.Errorf("no timeout property")
	}
	zero := 0.0
	p.Types, p.Type, p.ExclusiveMinimum = nil, "integer", &zero
	return schema, nil
}

// JobInput are the arguments of job_output and job_kill.
type JobInput struct {
	JobID string `json:"job_id" jsonschema:"the job id bash returned for run_in_background (bash-…)"`
}

// BashOutput is the structured result of the bash tool: Result for a
// foreground call, JobID for a background one.
type BashOutput struct {
	Result *sandbox.Result `json:"result,omitempty"`
	JobID  string          `json:"jobId,omitempty"`
}

// JobOutput is the structured result of job_output and job_kill.
type JobOutput struct {
	sandbox.JobOutput
	// Error is the sandbox failure of a job that could not run.
	Error string `json:"error,omitempty"`
}

// argError is a bad argument: a tool error naming it, and nothing runs.
func argError(field, format string, args ...any) error {
	return fmt.Errorf("invalid argument %s: %s", field, fmt.Sprintf(format, args...))
}

// checkBash validates the model's arguments at the edge; the executor
// checks again (prepare.Call).
func checkBash(in BashInput) error {
	switch {
	case strings.TrimSpace(in.Command) == "":
		return argError("command", "required and must not be empty")
	case strings.ContainsRune(in.Command, 0):
		return argError("command", "contains a NUL byte")
	case in.Timeout != nil && *in.Timeout <= 0:
		return argError("timeout", "must be a positive number of milliseconds, got %d", *in.Timeout)
	case strings.ContainsRune(in.Workdir, 0):
		return argError("workdir", "contains a NUL byte")
	case in.Workdir != "" && !strings.HasPrefix(in.Workdir, "/"):
		return argError("workdir", "%q is not an absolute path", in.Workdir)
	}
	return nil
}

// request builds the executor request of a bash call: the model chooses
// only the command, the timeout and the working directory.
func (s *Server) request(ctx context.Context, in BashInput) (*sandbox.Request, error) {
	req := &sandbox.Request{
		Command: in.Command,
		Workdir: in.Workdir,
		Env:     s.opts.Env,
		Session: s.opts.Session,
		Policy:  s.opts.Policy,
	}
	if in.Timeout != nil {
		req.TimeoutMs = *in.Timeout
	}
	if s.opts.Snapshot != nil {
		snap, err := s.opts.Snapshot(ctx)
		if err != nil {
			return nil, fmt.Errorf("sandbox unavailable: the DSH_* snapshot: %w", err)
		}
		req.DSHEnv = snap
	}
	return req, nil
}

func (s *Server) bash(ctx context.Context, _ *mcp.CallToolRequest, in BashInput) (*mcp.CallToolResult, any, error) {
	if err := checkBash(in); err != nil {
		return nil, nil, err
	}
	req, err := s.request(ctx, in)
	if err != nil {
		return nil, nil, err
	}
	log := s.opts.Logger.With().Str("session", req.Session.ID).Str("tool", ToolBash).Logger()
	if in.RunInBackground {
		id, err := s.jobs.Start(ctx, jobOwner, req)
		if err != nil {
			log.Warn().Err(err).Msg("background call not started")
			return nil, nil, sandboxError(err)
		}
		log.Debug().Str("job", id).Msg("background call started")
		// The first line is dsh's own wording (dsh-tool-bash), so prompts
		// written for dsh read it unchanged.
		text := fmt.Sprintf("started background job %s\nRead its new output with job_output {\"job_id\": %q}; stop it with job_kill.", id, id)
		return textResult(text, false), BashOutput{JobID: id}, nil
	}
	res, err := s.opts.Executor.Run(ctx, req)
	if err != nil {
		log.Warn().Err(err).Msg("call failed in the sandbox")
		return nil, nil, sandboxError(err)
	}
	log.Debug().Int("exit", sandbox.ExitCode(res, nil)).Msg("call ended")
	return textResult(render.Result(res), false), BashOutput{Result: res}, nil
}

func checkJob(in JobInput) error {
	if in.JobID == "" {
		return argError("job_id", "required")
	}
	return nil
}

func (s *Server) jobOutput(_ context.Context, _ *mcp.CallToolRequest, in JobInput) (*mcp.CallToolResult, any, error) {
	if err := checkJob(in); err != nil {
		return nil, nil, err
	}
	o, err := s.jobs.Output(jobOwner, in.JobID)
	if err != nil {
		return nil, nil, jobError(err)
	}
	return jobResult(o)
}

func (s *Server) jobKill(ctx context.Context, _ *mcp.CallToolRequest, in JobInput) (*mcp.CallToolResult, any, error) {
	if err := checkJob(in); err != nil {
		return nil, nil, err
	}
	kctx, cancel := context.WithTimeout(ctx, DefaultKillWait)
	defer cancel()
	if err := s.jobs.Kill(kctx, jobOwner, in.JobID); err != nil {
		return nil, nil, jobError(err)
	}
	o, err := s.jobs.Output(jobOwner, in.JobID)
	if err != nil {
		return nil, nil, jobError(err)
	}
	return jobResult(o)
}

func jobResult(o sandbox.JobOutput) (*mcp.CallToolResult, any, error) {
	out := JobOutput{JobOutput: o}
	if o.Err != nil {
		out.Error = o.Err.Error()
	}
	return textResult(RenderJob(o), o.Err != nil), out, nil
}

// jobError is the tool error of a job lookup.
func jobError(err error) error {
	if errors.Is(err, sandbox.ErrNotFound) {
		return argError("job_id", "%v", err)
	}
	return sandboxError(err)
}

// sandboxError is the tool error of a call the sandbox could not run:
// invalid requests name their field; anything else says the sandbox is
// unavailable, so the model never mistakes it for the command's output.
func sandboxError(err error) error {
	if errors.Is(err, sandbox.ErrInvalid) {
		return fmt.Errorf("invalid request: %w", err)
	}
	return fmt.Errorf("sandbox unavailable, nothing ran: %w", err)
}

func textResult(text string, isError bool) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: isError}
}

// RenderJob returns the model-facing text of one read of a background
// job: the new stdout, then "[stderr]" and the new stderr; "(no new
// output)" when both are empty; a notice per stream whose unread bytes
// were dropped (with the spill file once the job has ended); then
// "[running]" while the job runs, or how it ended in render.Result's
// words, with "[exit code: 0]" for success, or "[sandbox error: …]" when
// the job could not run. RenderJob is pure.
func RenderJob(o sandbox.JobOutput) string {
	var b strings.Builder
	b.WriteString(o.Stdout)
	if o.Stderr != "" {
		if b.Len() > 0 && !strings.HasSuffix(o.Stdout, "\n") {
			b.WriteByte('\n')
		}
		b.WriteString("[stderr]\n")
		b.WriteString(o.Stderr)
	}
	if b.Len() == 0 {
		b.WriteString("(no new output)")
	}
	var lines []string
	for _, d := range []struct {
		name    string
		dropped int64
		spill   func(*sandbox.Result) string
	}{
		{"stdout", o.StdoutDropped, func(r *sandbox.Result) string { return r.Stdout.SpillPath }},
		{"stderr", o.StderrDropped, func(r *sandbox.Result) string { return r.Stderr.SpillPath }},
	} {
		if d.dropped <= 0 {
			continue
		}
		line := fmt.Sprintf("[%d earlier bytes of %s were not read in time", d.dropped, d.name)
		switch {
		case o.Result != nil && d.spill(o.Result) != "":
			line += "; full output: " + d.spill(o.Result) + "]"
		case o.Done:
			line += "; no spill file holds them]"
		default:
			line += "; the spill file named when the job ends holds them]"
		}
		lines = append(lines, line)
	}
	switch {
	case !o.Done:
		lines = append(lines, "[running]")
	case o.Err != nil:
		lines = append(lines, "[sandbox error: "+o.Err.Error()+"]")
	case o.Result != nil:
		lines = append(lines, endMarkers(o.Result))
	}
	if len(lines) == 0 {
		return b.String()
	}
	if !strings.HasSuffix(b.String(), "\n") {
		b.WriteByte('\n')
	}
	b.WriteString(strings.Join(lines, "\n"))
	return b.String()
}

// endMarkers are render.Result's closing lines for res (aborted, timed
// out, signal, exit code), taken from Render itself so the wording has
// one source; "[exit code: 0]" when Render adds none.
func endMarkers(res *sandbox.Result) string {
	r := *res
	r.Stdout, r.Stderr = sandbox.Stream{}, sandbox.Stream{}
	text := strings.TrimPrefix(render.Result(&r), "(no output)")
	text = strings.TrimPrefix(text, "\n")
	if text == "" {
		return "[exit code: 0]"
	}
	return text
}
