package api

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// handleRun runs one foreground call: one RunResponse, or an NDJSON stream
// of Events when the request asks for it. Everything is validated before
// a slot is taken; a client that disconnects cancels the call.
func (s *Server) handleRun(w http.ResponseWriter, r *http.Request) error {
	rr, err := decodeRunBody(w, r)
	if err != nil {
		return err
	}
	req, err := s.request(r.Context(), rr)
	if err != nil {
		return err
	}
	queued := time.Now()
	if err := s.limit.acquire(r.Context()); err != nil {
		return err
	}
	defer s.limit.release()
	wait := time.Since(queued)
	s.metrics.queueWait.Observe(wait.Seconds())
	ctx := context.WithValue(r.Context(), callMetaKey{}, callMeta{callID: rr.CallID, queue: wait})
	run := observed{s: s}

	if !rr.Stream {
		res, err := run.Run(ctx, req)
		if err != nil {
			return err
		}
		return writeJSON(w, http.StatusOK, RunResponse{ExecutionID: req.CallID, Result: res, Rendered: sandbox.Render(res)})
	}
	st := &stream{w: w, rc: http.NewResponseController(w)}
	req.Stdout = st.writer(EventStdout)
	req.Stderr = st.writer(EventStderr)
	res, err := run.Run(ctx, req)
	if err != nil {
		if !st.started() {
			return err // nothing sent yet: a proper status
		}
		body := Body(err)
		st.send(Event{Type: EventError, Error: &body})
		return nil
	}
	st.send(Event{Type: EventResult, ExecutionID: req.CallID, Result: res, Rendered: sandbox.Render(res)})
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

func (st *stream) send(ev Event) {
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
	sw.st.send(Event{Type: sw.typ, Data: p})
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
	req, err := s.request(r.Context(), rr)
	if err != nil {
		return err
	}
	ctx := context.WithValue(r.Context(), callMetaKey{}, callMeta{callID: rr.CallID})
	id, err := s.jobs.Start(ctx, req.Session.ID, req)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, StartResponse{ID: id})
}

// owner is the job owner a request names: ?session=ID, "" for calls with
// no agent.
func owner(r *http.Request) string { return r.URL.Query().Get("session") }

func (s *Server) handleList(w http.ResponseWriter, r *http.Request) error {
	jobs := s.jobs.List(owner(r))
	if jobs == nil {
		jobs = []sandbox.JobInfo{}
	}
	return writeJSON(w, http.StatusOK, JobsResponse{Jobs: jobs})
}

// JobOutputResponse is the answer of GET /v1/jobs/{id}: the output since
// the previous read and, once the job has ended, its result or error.
type JobOutputResponse struct {
	sandbox.JobOutput
	Error *ErrorBody `json:"error,omitempty"`
}

func (s *Server) handleOutput(w http.ResponseWriter, r *http.Request) error {
	out, err := s.jobs.Output(owner(r), r.PathValue("id"))
	if err != nil {
		return err
	}
	resp := JobOutputResponse{JobOutput: out}
	if out.Err != nil {
		b := Body(out.Err)
		resp.Error = &b
	}
	return writeJSON(w, http.StatusOK, resp)
}

func (s *Server) handleKill(w http.ResponseWriter, r *http.Request) error {
	if err := s.jobs.Kill(r.Context(), owner(r), r.PathValue("id")); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, StartResponse{ID: r.PathValue("id")})
}

func (s *Server) handleRemove(w http.ResponseWriter, r *http.Request) error {
	if err := s.jobs.Remove(r.Context(), owner(r), r.PathValue("id")); err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, StartResponse{ID: r.PathValue("id")})
}

func (s *Server) handleDeclarations(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, DeclarationsResponse{Declarations: declarations(s.opts.Registry.List())})
}

func (s *Server) handleSnapshot(w http.ResponseWriter, r *http.Request) error {
	sr, err := DecodeSession(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		return err
	}
	snap, err := s.opts.Registry.Collect(r.Context(), overlay.Execution{Home: s.opts.Home, Session: sr.Session})
	if err != nil {
		return sandbox.Errorf(sandbox.ErrInternal, "DSH_* snapshot: %v", err)
	}
	return writeJSON(w, http.StatusOK, SnapshotResponse{Env: snap.Environ()})
}

func (s *Server) handleLocate(w http.ResponseWriter, r *http.Request) error {
	sr, err := DecodeSession(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		return err
	}
	if sr.Session == nil {
		return fieldErrorf("session", "is required")
	}
	resp := LocateResponse{}
	if loc, ok := s.locate(RunRequest{Session: sr.Session}); ok {
		resp.Location = &persistence.Location{Kind: loc.Kind, Path: loc.Path}
	}
	return writeJSON(w, http.StatusOK, resp)
}

func (s *Server) metricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
}
