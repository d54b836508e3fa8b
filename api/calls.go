package api

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

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
	info   types.CallInfo
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
	kind := types.CallKindRun
	if background {
		kind = types.CallKindJob
	}
	rc := &runningCall{
		info: types.CallInfo{ID: req.CallID, Kind: kind, SessionID: req.Session.ID, Policy: req.Policy.Name,
			Backend: string(req.Policy.Backend), State: types.CallQueued, Started: time.Now().UTC()},
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
		rc.info.State = types.CallRunning
	}
}

// handleCalls lists the executions of the requesting client that have not
// ended, oldest first; other clients' are invisible.
func (s *Server) handleCalls(w http.ResponseWriter, r *http.Request) error {
	key := requestClient(r).Key()
	out := []types.CallInfo{}
	s.mu.Lock()
	for _, rc := range s.calls {
		if rc.client == key {
			info := rc.info
			info.JobID = rc.job.get()
			out = append(out, info)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b types.CallInfo) int {
		return cmp.Or(a.Started.Compare(b.Started), strings.Compare(a.ID, b.ID))
	})
	return writeJSON(w, http.StatusOK, types.CallsResponse{Calls: out})
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
	return writeJSON(w, http.StatusOK, types.StartResponse{ID: id})
}
