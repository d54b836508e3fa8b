package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// DefaultMaxStdinBytes bounds a streamed stdin of one call when
// Options.MaxStdinBytes is 0.
const DefaultMaxStdinBytes = 1 << 30

// Form parts of a multipart POST /v1/run, in this order.
const (
	partRequest = "request"
	partStdin   = "stdin"
)

// stdinTooLarge is a streamed stdin over its bound: 413 naming "stdin".
func stdinTooLarge(limit int64) error {
	return errors.Join(&http.MaxBytesError{Limit: limit},
		&types.FieldError{Field: "stdin", Reason: fmt.Sprintf("more than %d bytes", limit)})
}

// decodeRun reads the RunRequest of POST /v1/run: an application/json
// body within MaxBodyBytes, or a multipart/form-data body whose "request"
// part is the RunRequest (within MaxBodyBytes) and whose optional "stdin"
// part, returned unread, is the command's stdin. The caller streams it.
func decodeRun(w http.ResponseWriter, r *http.Request) (*types.RunRequest, io.Reader, error) {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		rr, err := decodeRunBody(w, r)
		return rr, nil, err
	}
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, nil, fieldErrorf("body", "multipart: %v", err)
	}
	part, err := mr.NextPart()
	if err != nil || part.FormName() != partRequest {
		return nil, nil, fieldErrorf("body", "multipart: the first part must be %q (the JSON request)", partRequest)
	}
	rr, err := DecodeRun(&boundedReader{r: part, left: MaxBodyBytes, err: &http.MaxBytesError{Limit: MaxBodyBytes}})
	if err != nil {
		return nil, nil, err
	}
	if len(rr.Stdin) > 0 {
		return nil, nil, fieldErrorf("stdin", "inline stdin and a stdin part together")
	}
	part, err = mr.NextPart()
	switch {
	case errors.Is(err, io.EOF):
		return rr, nil, nil // no stdin part: an empty stdin
	case err != nil:
		return nil, nil, fieldErrorf("body", "multipart: %v", err)
	case part.FormName() != partStdin:
		return nil, nil, fieldErrorf("body", "multipart: the second part must be %q, not %q", partStdin, part.FormName())
	}
	return rr, part, nil
}

// boundedReader reads at most left bytes of r; one more is err. Read is
// for one goroutine; over may be asked from any.
type boundedReader struct {
	r    io.Reader
	left int64
	err  error
	over atomic.Bool
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		n, err := b.r.Read(one[:])
		if n > 0 {
			b.over.Store(true)
			return 0, b.err
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// maxStdin is the bound of one call's streamed stdin.
func (s *Server) maxStdin() int64 {
	if s.opts.MaxStdinBytes > 0 {
		return s.opts.MaxStdinBytes
	}
	return DefaultMaxStdinBytes
}

// streamStdin makes the multipart stdin part the command's stdin, bounded
// by maxStdin: beyond it, stop cancels the call with the 413 error. The
// request may now take as long as the call (no read deadline) and its
// answer may begin while the upload goes on (full duplex).
func (s *Server) streamStdin(w http.ResponseWriter, req *sandbox.Request, part io.Reader, stop context.CancelCauseFunc) *boundedReader {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.EnableFullDuplex()
	limit := s.maxStdin()
	b := &boundedReader{r: part, left: limit, err: stdinTooLarge(limit)}
	req.StdinReader = &stoppingReader{b: b, stop: stop}
	return b
}

// stoppingReader cancels the call once its stdin is over the bound.
type stoppingReader struct {
	b    *boundedReader
	stop context.CancelCauseFunc
}

func (r *stoppingReader) Read(p []byte) (int, error) {
	n, err := r.b.Read(p)
	if r.b.over.Load() {
		r.stop(r.b.err)
	}
	return n, err
}

// jobStdin is the open stdin of a background job started with
// stdinOpen: POST /v1/jobs/{id}/stdin writes into its pipe, one writer
// at a time, until a write closes it, the job ends, or the bound is
// passed. A writer waits for its turn only while its request lives and
// the job runs; the job's end interrupts the body read of the writer in
// turn, so a client that sends nothing holds nobody up. Safe for
// concurrent use.
type jobStdin struct {
	owner string
	job   *jobRef
	r     *io.PipeReader
	w     *io.PipeWriter

	turn    chan struct{} // one token, held by the writer in turn
	ended   chan struct{} // closed by end
	endOnce sync.Once

	mu        sync.Mutex // guards interrupt
	interrupt func()     // stops the body read of the writer in turn

	left   int64 // guarded by turn
	closed bool  // guarded by turn
}

func newJobStdin(owner string, job *jobRef, limit int64) *jobStdin {
	r, w := io.Pipe()
	return &jobStdin{owner: owner, job: job, r: r, w: w, left: limit, turn: make(chan struct{}, 1), ended: make(chan struct{})}
}

// errJobEnded ends a write into the stdin of a job that has ended.
var errJobEnded = errors.New("the job has ended")

// end is called when the job has ended: a write blocked on the pipe or
// on its body returns, and a writer waiting for its turn gives up.
func (js *jobStdin) end() {
	js.endOnce.Do(func() { close(js.ended) })
	js.r.CloseWithError(errJobEnded)
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.interrupt != nil {
		js.interrupt()
	}
}

func (js *jobStdin) hasEnded() bool {
	select {
	case <-js.ended:
		return true
	default:
		return false
	}
}

// write waits for its turn while ctx lives, then copies body into the
// job's stdin, at most the bytes left under the bound, and closes stdin
// when closeAfter is set, the job has ended or the bound is passed (then
// the error is the 413 one). interrupt (nil: none) must make a blocked
// body read return; the job's end calls it. It reports the bytes the
// stdin took and whether it is closed now.
func (js *jobStdin) write(ctx context.Context, body io.Reader, closeAfter bool, limit int64, interrupt func()) (written int64, closed bool, err error) {
	select {
	case js.turn <- struct{}{}:
	case <-ctx.Done():
		return 0, false, context.Cause(ctx)
	case <-js.ended:
		return 0, true, nil
	}
	defer func() { <-js.turn }()
	if js.closed {
		return 0, true, nil
	}
	js.mu.Lock()
	if js.hasEnded() {
		js.mu.Unlock()
		js.closed = true
		return 0, true, nil
	}
	js.interrupt = interrupt
	js.mu.Unlock()
	defer func() {
		js.mu.Lock()
		js.interrupt = nil
		js.mu.Unlock()
	}()
	b := &boundedReader{r: body, left: js.left, err: stdinTooLarge(limit)}
	written, err = io.Copy(js.w, b)
	js.left -= written
	switch {
	case b.over.Load():
		js.closed = true
		js.w.Close()
		return written, true, b.err
	case errors.Is(err, errJobEnded) || errors.Is(err, io.ErrClosedPipe) || (err != nil && js.hasEnded()):
		js.closed = true
		return written, true, nil
	case err != nil:
		return written, false, fieldErrorf("body", "reading: %v", err)
	}
	if closeAfter {
		js.closed = true
		js.w.Close()
	}
	return written, js.closed, nil
}

// openStdin registers the open stdin of a job about to start; the job's
// end (observed.Run) forgets it.
func (s *Server) openStdin(js *jobStdin) {
	s.mu.Lock()
	s.stdins[js] = true
	s.mu.Unlock()
}

func (s *Server) forgetStdin(js *jobStdin) {
	js.end()
	s.mu.Lock()
	delete(s.stdins, js)
	s.mu.Unlock()
}

// stdinOf finds the open stdin of owner's job id, nil when there is none.
func (s *Server) stdinOf(owner, id string) *jobStdin {
	s.mu.Lock()
	defer s.mu.Unlock()
	for js := range s.stdins {
		if js.owner == owner && js.job.get() == id {
			return js
		}
	}
	return nil
}

// handleStdin is POST /v1/jobs/{id}/stdin: the body goes into the job's
// open stdin as the command reads it; ?close=true closes it afterwards.
func (s *Server) handleStdin(w http.ResponseWriter, r *http.Request) error {
	owner, err := s.owner(r)
	if err != nil {
		return err
	}
	id := r.PathValue("id")
	closeAfter := false
	if v := r.URL.Query().Get("close"); v != "" {
		if closeAfter, err = strconv.ParseBool(v); err != nil {
			return fieldErrorf("close", "%q is not true or false", v)
		}
	}
	js := s.stdinOf(owner, id)
	if js == nil {
		for _, j := range s.jobs.List(owner) {
			if j.ID == id {
				return fieldErrorf("stdin", "job %s has no open stdin: it was started without stdinOpen, its stdin was closed, or it has ended", id)
			}
		}
		return sandbox.Errorf(sandbox.ErrNotFound, "no job %q", id)
	}
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{}) // bounded by the job's life
	interrupt := func() { _ = rc.SetReadDeadline(time.Now()) }
	written, closed, err := js.write(r.Context(), r.Body, closeAfter, s.maxStdin(), interrupt)
	if err != nil {
		return err
	}
	return writeJSON(w, http.StatusOK, types.StdinResponse{ID: id, Written: written, Closed: closed})
}
