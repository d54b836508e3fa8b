package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/jobs"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/render"
)

// handleRun runs one foreground call: one RunResponse, or an NDJSON stream
// of Events when the request asks for it. Everything is validated before
// a slot is taken; a client that disconnects cancels the call.
func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) error {
	rr, stdin, err := decodeRun(w, r)
	if err != nil {
		return err
	}
	if rr.StdinOpen {
		return fieldErrorf("stdinOpen", "only background jobs keep stdin open; stream a run's stdin as a multipart stdin part")
	}
	req, err := s.request(r.Context(), requestClient(r), rr)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancelCause(r.Context())
	defer stop(nil)
	var bounded *boundedReader
	if stdin != nil {
		bounded = s.streamStdin(w, req, stdin, stop)
	}
	queued := time.Now()
	t, err := s.limit.acquire(r.Context())
	if err != nil {
		return err
	}
	defer t.release()
	wait := time.Since(queued)
	s.metrics.queueWait.Observe(wait.Seconds())
	ctx := context.WithValue(runCtx, callMetaKey{}, callMeta{callID: rr.CallID, queue: wait})
	run := observed{s: s}
	// A stdin over its bound stopped the call: the answer is the 413,
	// not the stopped call's outcome.
	outcome := func(res *sandbox.Result, err error) (*sandbox.Result, error) {
		if bounded != nil && bounded.over.Load() {
			return nil, bounded.err
		}
		return res, err
	}

	if !rr.Stream {
		res, err := outcome(run.Run(ctx, req))
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, types.RunResponse{ExecutionID: req.CallID, Result: res, Rendered: render.Result(res)})
	}
	st := &stream{w: w, rc: http.NewResponseController(w)}
	req.Stdout = st.writer(types.EventStdout)
	req.Stderr = st.writer(types.EventStderr)
	res, err := outcome(run.Run(ctx, req))
	if err != nil {
		if !st.started() {
			return err // nothing sent yet: a proper status
		}
		body := types.Body(err)
		st.send(types.Event{Type: types.EventError, Error: &body})
		return nil
	}
	st.send(types.Event{Type: types.EventResult, ExecutionID: req.CallID, Result: res, Rendered: render.Result(res)})
	return nil
}

// stream writes NDJSON events; the 200 header goes out with the first one.
type stream struct {
	mu    sync.Mutex
	w     http.ResponseWriter
	rc    *http.ResponseController
	begun bool
	dead  bool
}

func (st *stream) started() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.begun
}

func (st *stream) send(ev types.Event) {
	line, err := json.Marshal(ev)
	if err != nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.dead {
		return
	}
	if !st.begun {
		st.w.Header().Set("Content-Type", "application/x-ndjson")
		st.w.WriteHeader(http.StatusOK)
		st.begun = true
	}
	if _, err := st.w.Write(append(line, '\n')); err != nil {
		st.dead = true // the client left; its context cancels the call
		return
	}
	_ = st.rc.Flush()
}

type streamWriter struct {
	st  *stream
	typ string
}

func (st *stream) writer(typ string) streamWriter { return streamWriter{st, typ} }

func (sw streamWriter) Write(p []byte) (int, error) {
	sw.st.send(types.Event{Type: sw.typ, Data: p})
	return len(p), nil
}

func (s *Server) handleStart(w http.ResponseWriter, r *http.Request) error {
	rr, err := decodeRunBody(w, r)
	if err != nil {
		return err
	}
	if rr.Stream {
		return fieldErrorf("stream", "background jobs do not stream; read them with GET /v1/jobs/{id}")
	}
	cl := requestClient(r)
	req, err := s.request(r.Context(), cl, rr)
	if err != nil {
		return err
	}
	// The job holds a slot while it runs, as a foreground call does; it
	// may wait for one in the queue, and is refused when that is full.
	t, err := s.limit.admit()
	if err != nil {
		return err
	}
	ref := &jobRef{}
	meta := callMeta{callID: rr.CallID, ticket: t, job: ref}
	owner := jobOwner(cl, req.Session.ID)
	if rr.StdinOpen {
		meta.stdin = newJobStdin(owner, ref, s.maxStdin())
		req.StdinReader = meta.stdin.r
		s.openStdin(meta.stdin)
	}
	ctx := context.WithValue(r.Context(), callMetaKey{}, meta)
	id, err := s.jobs.Start(ctx, owner, req)
	if err != nil {
		if meta.stdin != nil {
			s.forgetStdin(meta.stdin)
		}
		t.release()
		if errors.Is(err, jobs.ErrLimit) {
			return fmt.Errorf("%w: the session has %d background jobs that have not ended, the limit (--max-jobs-per-session)", types.ErrOverloaded, s.opts.MaxJobsPerSession)
		}
		return err
	}
	ref.set(id)
	return writeJSON(w, http.StatusOK, types.StartResponse{ID: id})
}

// queryText refuses a NUL byte in any query parameter, naming it.
func queryText(r *http.Request) error {
	for name, vs := range r.URL.Query() {
		for _, v := range vs {
			if strings.ContainsRune(v, 0) || strings.ContainsRune(name, 0) {
				return fieldErrorf(strings.ReplaceAll(name, "\x00", ""), "query parameter contains a NUL byte")
			}
		}
	}
	return nil
}

// requestClient is the client identify attached to r.
func requestClient(r *http.Request) Client { return clientOf(r.Context()) }

// jobOwner is the jobs.Runner owner of a client's session: jobs are
// visible only to the client that started them, per session.
func jobOwner(cl Client, sessionID string) string { return cl.Key() + "\x00" + sessionID }

// owner is the job owner a request names: its client and ?session=ID
// ("" for calls with no agent). A session of another client is not
// found.
func (s *Server) owner(r *http.Request) (string, error) {
	if id := r.PathValue("id"); strings.ContainsRune(id, 0) {
		return "", fieldErrorf("id", "contains a NUL byte")
	}
	cl := requestClient(r)
	session := r.URL.Query().Get("session")
	if session != "" {
		if err := s.sessions.check(session, cl.Key()); err != nil {
			return "", err
		}
	}
	return jobOwner(cl, session), nil
}

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) error {
	owner, err := s.owner(r)
	if err != nil {
		return err
	}
	jobs := s.jobs.List(owner)
	if jobs == nil {
		jobs = []sandbox.JobInfo{}
	}
	return writeJSON(w, http.StatusOK, types.JobsResponse{Jobs: jobs})
}

func (s *Server) handleOutput(w http.ResponseWriter, r *http.Request) error {
	owner, err := s.owner(r)
	if err != nil {
		return err
	}
	out, err := s.jobs.Output(owner, r.PathValue("id"))
	if err != nil {
		return err
	}
	resp := types.JobOutputResponse{JobOutput: out}
	if out.Err != nil {
		b := types.Body(out.Err)
		resp.Error = &b
	}
	return writeJSON(w, http.StatusOK, resp)
}

func (s *Server) handleKill(w http.ResponseWriter, r *http.Request) error {
	owner, err := s.owner(r)
	if err != nil {
		return err
	}
	if err := s.jobs.Kill(r.Context(), owner, r.PathValue("id")); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, types.StartResponse{ID: r.PathValue("id")})
}

func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) error {
	owner, err := s.owner(r)
	if err != nil {
		return err
	}
	if err := s.jobs.Remove(r.Context(), owner, r.PathValue("id")); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, types.StartResponse{ID: r.PathValue("id")})
}

func (s *Server) handleDeclarations(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, Declarations(s.opts.Registry.List()))
}

func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) error {
	sr, err := DecodeSession(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		return err
	}
	if sr.Session != nil {
		if err := s.sessions.claim(sr.Session.ID, requestClient(r).Key()); err != nil {
			return err
		}
	}
	snap, err := s.opts.Registry.Collect(r.Context(), overlay.Execution{Home: s.opts.Home, Session: sr.Session})
	if err != nil {
		return sandbox.Errorf(sandbox.ErrInternal, "DSH_* snapshot: %v", err)
	}
	return writeJSON(w, http.StatusOK, types.SnapshotResponse{Env: snap.Environ()})
}

func (s *Server) handleLocate(w http.ResponseWriter, r *http.Request) error {
	sr, err := DecodeSession(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		return err
	}
	if sr.Session == nil {
		return fieldErrorf("session", "is required")
	}
	if err := s.sessions.claim(sr.Session.ID, requestClient(r).Key()); err != nil {
		return err
	}
	resp := types.LocateResponse{}
	if loc, ok := s.locate(types.RunRequest{Session: sr.Session}); ok {
		resp.Location = &persistence.Location{Kind: loc.Kind, Path: loc.Path}
	}
	return writeJSON(w, http.StatusOK, resp)
}

func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
}
