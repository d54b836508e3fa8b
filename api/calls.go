package api

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

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

// jobRef receives a background job's id after Start returned it.
type jobRef struct{ id atomic.Pointer[string] }

func (j *jobRef) set(id string) { j.id.Store(&id) }

func (j *jobRef) get() string {
	if j == nil {
		return ""
	}
	if p := j.id.Load(); p != nil {
		return *p
	}
	return ""
}

// runningCall is one tracked execution.
type runningCall struct {
	info   CallInfo
	client string
	job    *jobRef
	cancel context.CancelFunc
	ended  chan struct{}
}

// clientOf is the client a call's context carries (anonymous when none).
func clientOf(ctx context.Context) Client {
	if c, ok := ClientFrom(ctx); ok {
		return c
	}
	return Client{Kind: ClientAnonymous, Name: "anonymous", UID: -1, GID: -1, PID: -1}
}

// track registers an execution of client cl until done is called; the
// returned context is cancelled by DELETE /v1/calls/{id} and by done.
func (s *Server) track(ctx context.Context, cl Client, req *sandbox.Request, background bool, job *jobRef) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	kind := CallKindRun
	if background {
		kind = CallKindJob
	}
	rc := &runningCall{
		info: CallInfo{ID: req.CallID, Kind: kind, SessionID: req.Session.ID, Policy: req.Policy.Name,
			Backend: req.Policy.Backend, State: CallQueued, Started: time.Now().UTC()},
		client: cl.Key(), job: job, cancel: cancel, ended: make(chan struct{}),
	}
	s.mu.Lock()
	s.calls[req.CallID] = rc
	s.mu.Unlock()
	return ctx, func() {
		s.mu.Lock()
		if s.calls[req.CallID] == rc {
			delete(s.calls, req.CallID)
		}
		s.mu.Unlock()
		cancel()
		close(rc.ended)
	}
}

// running marks a tracked execution as executing.
func (s *Server) running(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rc := s.calls[id]; rc != nil {
		rc.info.State = CallRunning
	}
}

// handleCalls lists the executions of the requesting client that have not
// ended, oldest first; other clients' are invisible.
func (s *Server) handleCalls(w http.ResponseWriter, r *http.Request) error {
	key := requestClient(r).Key()
	out := []CallInfo{}
	s.mu.Lock()
	for _, rc := range s.calls {
		if rc.client == key {
			info := rc.info
			info.JobID = rc.job.get()
			out = append(out, info)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b CallInfo) int {
		return cmp.Or(a.Started.Compare(b.Started), strings.Compare(a.ID, b.ID))
	})
	return writeJSON(w, http.StatusOK, CallsResponse{Calls: out})
}

// handleCancel cancels one execution of the requesting client and waits
// until it has ended (its container is torn down by its executor); an
// unknown id and another client's call are both 404.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if strings.ContainsRune(id, 0) {
		return fieldErrorf("id", "contains a NUL byte")
	}
	s.mu.Lock()
	rc := s.calls[id]
	s.mu.Unlock()
	if rc == nil || rc.client != requestClient(r).Key() {
		return sandbox.Errorf(sandbox.ErrNotFound, "no running call %q", id)
	}
	rc.cancel()
	select {
	case <-rc.ended:
	case <-r.Context().Done():
		return sandbox.Errorf(sandbox.ErrUnavailable, "call %s: cancelled, the request ended before it had: %v", id, r.Context().Err())
	}
	return writeJSON(w, http.StatusOK, StartResponse{ID: id})
}
