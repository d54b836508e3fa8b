package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/jobs"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/redact"
	"github.com/dsh-sandbox/dsh-sandbox/request"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/prepare"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/secrets"
)

// Defaults of Options.
const (
	DefaultMaxConcurrent = 4
	DefaultMaxQueue      = 64
	// DefaultMaxJobsPerSession bounds the live background jobs of one
	// session of one client.
	DefaultMaxJobsPerSession = 8
	// DefaultJobTTL is how long an ended background job stays readable.
	DefaultJobTTL = time.Hour
	// RetryAfterSeconds is the Retry-After of a 429.
	RetryAfterSeconds = 1
)

// Timeouts of every connection.
const (
	// ReadHeaderTimeout bounds reading a request's header block.
	ReadHeaderTimeout = 10 * time.Second
	// ReadTimeout bounds reading a whole request, body included (bodies
	// are at most MaxBodyBytes).
	ReadTimeout = 60 * time.Second
	// IdleTimeout closes a keep-alive connection with no request.
	IdleTimeout = 2 * time.Minute
)

// Options configure a Server. Executor, Policies, Registry and Home are
// required; every other zero field means the documented default.
type Options struct {
	// Executor runs every call; the wiring picks the backend(s) per
	// policy. Required.
	Executor sandbox.Executor
	// Policies are the policies a request may name, by name. Required.
	Policies map[string]sandbox.Policy
	// Registry builds the DSH_* snapshot of every call; it must have the
	// built-in contributors installed. Required.
	Registry *overlay.Registry
	// Locator returns the current persistence that answers Locate (for
	// the session's transcript directory); nil, or a nil result, means
	// no transcript.
	Locator func() persistence.Locator
	// Home is the absolute dsh home of every execution. Required.
	Home string
	// SessionsRoot is the absolute JSONL sessions root the Locator's
	// transcripts lie in. When set, a call whose located transcript
	// directory is not strictly inside it is refused (403) and nothing is
	// mounted; empty means no such check.
	SessionsRoot string
	// MaxConcurrent bounds concurrent executions, foreground calls and
	// background jobs alike; 0 means DefaultMaxConcurrent.
	MaxConcurrent int
	// MaxQueue bounds executions waiting for a slot; beyond it the answer
	// is 429. 0 means DefaultMaxQueue; negative means none.
	MaxQueue int
	// MaxJobsPerSession bounds the background jobs of one session of one
	// client that have not ended; beyond it POST /v1/jobs answers 429.
	// 0 means DefaultMaxJobsPerSession; negative means no bound.
	MaxJobsPerSession int
	// JobTTL is how long an ended job stays readable before it is
	// removed. 0 means DefaultJobTTL; negative keeps ended jobs until
	// they are removed.
	JobTTL time.Duration
	// WorkspaceRoots are clean absolute directories every call's
	// workspace (session cwd, cwd, workdir) must lie in; nil means any
	// directory that is not a system directory.
	WorkspaceRoots []string
	// ProtectedPaths are the deployment's paths no workspace may contain
	// or lie inside, by name ("sessions root", "dsh home", "state dir",
	// "service socket", …); a call naming such a workspace is refused
	// (403). nil protects nothing beyond the system directories.
	ProtectedPaths map[string]string
	// MaxStdinBytes bounds the streamed stdin of one call: the stdin part
	// of a multipart POST /v1/run, or all that POST /v1/jobs/{id}/stdin
	// sends to one job. 0 means DefaultMaxStdinBytes.
	MaxStdinBytes int64
	// Audit receives one record per execution; nil means none.
	Audit *AuditLog
	// LeakedObjects reports how many objects the reaper removed, for the
	// metrics; nil means 0.
	LeakedObjects func() float64
	// Collectors are more metrics to serve on GET /metrics (the warm
	// pool's); nil means none.
	Collectors []prometheus.Collector
	// Logger receives request logs (info) and per-call events (debug);
	// the zero value logs nothing. Env values and command text are never
	// logged.
	Logger zerolog.Logger
	// Detector is the pattern detector that also redacts the outcome
	// (error text, egress record) of a call whose policy sets
	// RedactDetectors (secrets.RedactOutcome), the one the executors
	// redact its output with (driver.Service.Detector); nil means none,
	// and then a call or job under such a policy is refused before it
	// runs (secrets.CheckDetector: class unavailable, 503, naming
	// redact.detectors).
	Detector redact.Detector
}

// Server is the HTTP/JSON service. Create it with NewServer, serve
// listeners with Serve and stop it with Shutdown. It is safe for
// concurrent use.
type Server struct {
	opts     Options
	jobs     *jobs.Runner
	limit    *limiter
	metrics  *metrics
	handler  http.Handler
	sessions sessionOwners

	base   context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	servers  []*http.Server
	policies map[string]sandbox.Policy
	calls    map[string]*runningCall
	stdins   map[*jobStdin]bool
}

// NewServer validates opts and returns a Server that is not yet serving.
func NewServer(opts Options) (*Server, error) {
	switch {
	case opts.Executor == nil:
		return nil, errors.New("api: Options.Executor is required")
	case len(opts.Policies) == 0:
		return nil, errors.New("api: Options.Policies is required")
	case opts.Registry == nil:
		return nil, errors.New("api: Options.Registry is required")
	case opts.Home == "":
		return nil, errors.New("api: Options.Home is required")
	case opts.SessionsRoot != "" && !filepath.IsAbs(opts.SessionsRoot):
		return nil, fmt.Errorf("api: Options.SessionsRoot %q is not an absolute path", opts.SessionsRoot)
	}
	if opts.SessionsRoot != "" {
		opts.SessionsRoot = filepath.Clean(opts.SessionsRoot)
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = DefaultMaxConcurrent
	}
	switch {
	case opts.MaxQueue == 0:
		opts.MaxQueue = DefaultMaxQueue
	case opts.MaxQueue < 0:
		opts.MaxQueue = 0
	}
	switch {
	case opts.MaxJobsPerSession == 0:
		opts.MaxJobsPerSession = DefaultMaxJobsPerSession
	case opts.MaxJobsPerSession < 0:
		opts.MaxJobsPerSession = 0
	}
	switch {
	case opts.JobTTL == 0:
		opts.JobTTL = DefaultJobTTL
	case opts.JobTTL < 0:
		opts.JobTTL = 0
	}
	if opts.LeakedObjects == nil {
		opts.LeakedObjects = func() float64 { return 0 }
	}
	s := &Server{opts: opts, limit: newLimiter(opts.MaxConcurrent, opts.MaxQueue), policies: opts.Policies, calls: map[string]*runningCall{}, stdins: map[*jobStdin]bool{}}
	s.metrics = newMetrics(s.limit, opts.LeakedObjects, opts.Collectors)
	s.jobs = jobs.NewWith(observed{s: s, background: true}, jobs.Options{
		MaxLivePerOwner: opts.MaxJobsPerSession,
		TTL:             opts.JobTTL,
	})
	s.base, s.cancel = context.WithCancel(context.Background())
	s.handler = s.routes()
	return s, nil
}

// SetPolicies replaces the policies requests may name (SIGHUP reloads
// them); calls already running keep theirs. An empty map is refused.
func (s *Server) SetPolicies(p map[string]sandbox.Policy) error {
	if len(p) == 0 {
		return errors.New("api: SetPolicies: no policies")
	}
	s.mu.Lock()
	s.policies = p
	s.mu.Unlock()
	return nil
}

func (s *Server) policy(name string) (sandbox.Policy, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.policies[name]
	return p, ok
}

// Handler returns the service's handler without tokens: a request that
// did not come through Serve is an anonymous client.
func (s *Server) Handler() http.Handler { return identify(nil, s.handler) }

// Serve is ServeClients with one token client named LegacyTokenName, or
// none when token is empty.
func (s *Server) Serve(l net.Listener, token string) error {
	var tokens []TokenClient
	if token != "" {
		tokens = []TokenClient{{Name: LegacyTokenName, Token: token}}
	}
	return s.ServeClients(l, tokens)
}

// ServeClients accepts connections on l until Shutdown. With tokens,
// every request needs "Authorization: Bearer <token>" of one of them
// (compared in constant time) and is that token's client; others get 401
// before their body is read. Without, a Unix-socket peer is identified
// by its credentials. A Unix-socket peer that is itself a sandboxed call
// gets 403. It returns http.ErrServerClosed after Shutdown.
func (s *Server) ServeClients(l net.Listener, tokens []TokenClient) error {
	srv := &http.Server{
		Handler:           identify(tokens, s.handler),
		MaxHeaderBytes:    MaxHeaderBytes,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		IdleTimeout:       IdleTimeout,
		BaseContext:       func(net.Listener) context.Context { return s.base },
		ConnContext:       connContext,
	}
	s.mu.Lock()
	if s.base.Err() != nil {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.servers = append(s.servers, srv)
	s.mu.Unlock()
	return srv.Serve(l)
}

// Shutdown stops accepting connections and lets running calls finish
// until ctx ends; then it cancels them (each container is stopped and torn
// down by its executor), kills background jobs and waits for the handlers
// to return, at most a further 30 s. It returns ctx's error when calls had
// to be cancelled.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	servers := s.servers
	s.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(servers))
	for i, srv := range servers {
		wg.Go(func() { errs[i] = srv.Shutdown(ctx) })
	}
	wg.Wait()
	drainErr := errors.Join(errs...)
	s.mu.Lock()
	s.cancel() // abort whatever still runs
	s.mu.Unlock()
	cleanup, done := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer done()
	jobsErr := s.jobs.KillAll(cleanup)
	if drainErr != nil {
		for _, srv := range servers {
			wg.Go(func() { _ = srv.Shutdown(cleanup) })
		}
		wg.Wait()
	}
	return errors.Join(drainErr, jobsErr)
}

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		mux.Handle(pattern, s.logged(pattern, h))
	}
	handle("POST /v1/run", s.handleRun)
	handle("POST /v1/jobs", s.handleStart)
	handle("GET /v1/jobs", s.handleList)
	handle("GET /v1/jobs/{id}", s.handleOutput)
	handle("POST /v1/jobs/{id}/kill", s.handleKill)
	handle("DELETE /v1/jobs/{id}", s.handleRemove)
	handle("POST /v1/jobs/{id}/stdin", s.handleStdin)
	handle("GET /v1/calls", s.handleCalls)
	handle("DELETE /v1/calls/{id}", s.handleCancel)
	handle("GET /v1/env", s.handleDeclarations)
	handle("POST /v1/snapshot", s.handleSnapshot)
	handle("POST /v1/locate", s.handleLocate)
	handle("GET /v1/health", func(w http.ResponseWriter, _ *http.Request) error {
		return writeJSON(w, http.StatusOK, types.HealthResponse{Status: "ok"})
	})
	handle("GET /v1/openapi.yaml", func(w http.ResponseWriter, _ *http.Request) error {
		w.Header().Set("Content-Type", "application/yaml")
		_, err := w.Write(OpenAPI)
		return err
	})
	mux.Handle("GET /metrics", s.metricsHandler())
	mux.Handle("/", s.logged("other", func(w http.ResponseWriter, r *http.Request) error {
		if allow := allowed(mux, r); len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			return fmt.Errorf("%w: %s %s: the path answers %s", types.ErrMethodNotAllowed, r.Method, r.URL.Path, strings.Join(allow, ", "))
		}
		return sandbox.Errorf(sandbox.ErrNotFound, "no such endpoint")
	}))
	return mux
}

// methods are the request methods allowed probes.
var methods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// allowed lists the methods a route of mux answers for r's path; none
// means the path is unknown. The catch-all "/" route does not count.
func allowed(mux *http.ServeMux, r *http.Request) []string {
	var out []string
	for _, m := range methods {
		probe := &http.Request{Method: m, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != "/" {
			out = append(out, m)
		}
	}
	return out
}

// statusWriter remembers the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

type requestIDKey struct{}

// logged wraps h: a request id, the error answer, metrics and one info
// line per request (method, route, status, duration; no bodies).
func (s *Server) logged(route string, h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		id := newRequestID()
		w.Header().Set("X-Request-Id", id)
		sw := &statusWriter{ResponseWriter: w}
		r = r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id))
		err := queryText(r)
		if err == nil {
			err = h(sw, r)
		}
		if err != nil && sw.status == 0 {
			writeError(sw, err)
		}
		s.metrics.requests.WithLabelValues(route, fmt.Sprint(sw.status)).Inc()
		ev := s.opts.Logger.Info()
		if sw.status >= 500 {
			ev = s.opts.Logger.Warn()
		}
		ev = ev.Str("request", id).Str("method", r.Method).Str("route", route).Int("status", sw.status).Dur("duration", time.Since(start))
		if cl, ok := ClientFrom(r.Context()); ok {
			ev = ev.Str("client", cl.Key())
		}
		if err != nil {
			ev = ev.Str("error", types.Body(err).Class)
			if fe := (*types.FieldError)(nil); errors.As(err, &fe) {
				ev = ev.Str("field", fe.Field)
			}
		}
		ev.Msg("request")
	})
}

func newRequestID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "req-" + hex.EncodeToString(b[:])
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, err = w.Write(append(data, '\n'))
	return err
}

func writeError(w http.ResponseWriter, err error) {
	status := HTTPStatus(err)
	switch status {
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", fmt.Sprint(RetryAfterSeconds))
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="dsh-sandbox"`)
	}
	_ = writeJSON(w, status, types.ErrorResponse{Error: types.Body(err)})
}

// decodeRunBody strictly decodes a RunRequest body within MaxBodyBytes.
func decodeRunBody(w http.ResponseWriter, r *http.Request) (*types.RunRequest, error) {
	return DecodeRun(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
}

// request turns a decoded RunRequest of client cl into a sandbox.Request:
// the named policy, the client's workspace and workdir checked against
// its scope (checkDir), the session claimed for the client, the
// service's own DSH_* snapshot checked against the harness's
// (harnessEnv), the session's mounts derived from the service's own
// Locate (checkTranscript) and a new execution id.
//
// The snapshot and Locate see the header as the client sent it, cwd as
// written, as dsh computes them; the workspace is the resolved cwd.
func (s *Server) request(ctx context.Context, cl Client, rr *types.RunRequest) (*sandbox.Request, error) {
	pol, ok := s.policy(rr.Policy)
	if !ok {
		return nil, fieldErrorf("policy", "%q is not a policy this service knows", rr.Policy)
	}
	pol, err := narrowed(rr, pol, s.opts.ProtectedPaths)
	if err != nil {
		return nil, err
	}
	// Its outcome is redacted here (secrets.RedactOutcome): a policy this
	// service cannot redact as it asks does not run.
	if err := secrets.CheckDetector(pol, s.opts.Detector); err != nil {
		return nil, err
	}
	field, cwd := "cwd", rr.Cwd
	if rr.Session != nil {
		field, cwd = "session.cwd", rr.Session.Cwd
	}
	workspace := cwd
	if cwd != "" {
		resolved, err := s.checkDir(cl, field, cwd)
		if err != nil {
			return nil, err
		}
		workspace = resolved
	}
	if rr.Workdir != "" {
		if _, err := s.checkDir(cl, "workdir", rr.Workdir); err != nil {
			return nil, err
		}
	}
	if rr.Session != nil {
		if err := s.sessions.claim(rr.Session.ID, cl.Key()); err != nil {
			return nil, err
		}
	}
	if l, ok := s.locate(*rr); ok {
		// The id, escaped, names the transcript directory: one file name.
		if dir := filepath.Dir(l.Path); len(filepath.Base(dir)) > 255 || len(l.Path) > MaxPathBytes {
			return nil, fieldErrorf("session.id", "names a transcript path the file system cannot hold (the directory name is %d bytes once escaped, at most 255)", len(filepath.Base(dir)))
		}
	}
	blame := "session.cwd"
	if rr.DSHEnv != nil {
		blame = "dshEnv." + overlay.KeySessionJSONL
	}
	in := request.Input{
		Policy:          pol, // narrowed above, so that a refusal names its field first
		Header:          rr.Session,
		Workspace:       workspace,
		Locator:         s.locator(),
		CheckTranscript: func(path string) error { return s.checkTranscript(blame, path) },
		Snapshot: func(ctx context.Context) ([]string, error) {
			snap, err := s.opts.Registry.Collect(ctx, overlay.Execution{Home: s.opts.Home, Session: rr.Session})
			if err != nil {
				return nil, sandbox.Errorf(sandbox.ErrInternal, "DSH_* snapshot: %v", err)
			}
			return s.harnessEnv(cl, rr.DSHEnv, snap)
		},
	}
	// The harness user owns the session directory: a socket peer by its
	// credentials; a token or anonymous client leaves it to the service.
	if cl.Kind == ClientSocket && cl.UID >= 0 && cl.GID >= 0 {
		in.Owner = sandbox.Owner{UID: uint32(cl.UID), GID: uint32(cl.GID), Set: true}
	}
	req, err := request.Build(ctx, in)
	if err != nil {
		return nil, err
	}
	req.Command = rr.Command
	req.Workdir = rr.Workdir
	req.TimeoutMs = rr.TimeoutMs
	req.StdoutMaxBytes = rr.StdoutMaxBytes
	req.Stdin = rr.Stdin
	req.Env = rr.Env
	req.CallID = prepare.NewCallID()
	return req, nil
}

// locator is the current persistence's Locate, or nil for none.
func (s *Server) locator() persistence.Locator {
	if s.opts.Locator == nil {
		return nil
	}
	if l := s.opts.Locator(); l != nil {
		return l
	}
	return nil
}

func (s *Server) locate(rr types.RunRequest) (persistence.Location, bool) {
	l := s.locator()
	if l == nil || rr.Session == nil {
		return persistence.Location{}, false
	}
	return l.Locate(*rr.Session)
}

type callMetaKey struct{}

// callMeta travels with a call's context to the observed executor.
type callMeta struct {
	callID string
	queue  time.Duration
	// ticket is a background job's admission; the job waits for its slot
	// and releases it when it ends. nil for foreground calls, which hold
	// their slot in the handler.
	ticket *ticket
	// job receives a background job's id once Start returned it; nil
	// for foreground calls.
	job *jobRef
	// stdin is a background job's open stdin (stdinOpen); forgotten
	// when the job ends. nil otherwise.
	stdin *jobStdin
}

// observed wraps the executor with the audit log and metrics; foreground
// calls and background jobs both run through it.
type observed struct {
	s          *Server
	background bool
}

func (o observed) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	meta, _ := ctx.Value(callMetaKey{}).(callMeta)
	cl := clientOf(ctx)
	ctx, done := o.s.track(ctx, cl, req, o.background, meta.job)
	defer done()
	if meta.stdin != nil {
		defer o.s.forgetStdin(meta.stdin)
	}
	if t := meta.ticket; t != nil {
		defer t.release()
		queued := time.Now()
		if err := t.wait(ctx); err != nil {
			return nil, err
		}
		meta.queue = time.Since(queued)
		o.s.metrics.queueWait.Observe(meta.queue.Seconds())
	}
	o.s.running(req.CallID)
	start := time.Now()
	res, err := o.s.opts.Executor.Run(ctx, req)
	took := time.Since(start)
	o.s.metrics.observe(string(req.Policy.Backend), took, res, err)
	ev := o.s.opts.Logger.Info().Str("call", req.CallID).Str("session", req.Session.ID).Str("client", cl.Key()).
		Str("policy", req.Policy.Name).Str("backend", string(req.Policy.Backend)).Bool("background", o.background).
		Str("outcome", outcome(res, err)).Dur("duration", took)
	if res != nil && res.ExitCode != nil {
		ev = ev.Int("exitCode", *res.ExitCode)
	}
	ev.Msg("call")
	// Every front end (JSON, NDJSON, jobs) and the audit log get the
	// outcome from here, redacted once.
	res, err = secrets.RedactOutcome(req.Policy, o.s.opts.Detector, res, err)
	if a := o.s.opts.Audit; a != nil {
		rec := auditRecord(req, meta.callID, o.background, meta.queue, res, err)
		if cl, ok := ClientFrom(ctx); ok {
			rec.Client = cl.Key()
		}
		if aerr := a.Append(rec); aerr != nil {
			o.s.opts.Logger.Error().Err(aerr).Str("call", req.CallID).Msg("audit log append failed")
		}
	}
	return res, err
}
