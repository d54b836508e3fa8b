package sandbox

import (
	"cmp"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// JobOutput is one read of a background job.
type JobOutput struct {
	// ID is the job id.
	ID string `json:"id"`
	// Stdout and Stderr are the output produced since the previous read,
	// at most the call's tail size each (the newest bytes are kept).
	Stdout string `json:"stdout"`
	Stderr string `json:"stderr"`
	// StdoutDropped and StderrDropped count the bytes produced since the
	// previous read that are not in Stdout and Stderr because they were
	// not read in time. The spill files of the final Result hold them.
	StdoutDropped int64 `json:"stdoutDropped"`
	StderrDropped int64 `json:"stderrDropped"`
	// Done is true once the job has ended; then exactly one of Result and
	// Err is set, and all output has been delivered by this or earlier
	// reads.
	Done   bool    `json:"done"`
	Result *Result `json:"result,omitempty"`
	// Err is the sandbox error Executor.Run returned.
	Err error `json:"-"`
}

// JobInfo describes a job for List.
type JobInfo struct {
	ID      string    `json:"id"`
	Command string    `json:"command"`
	Started time.Time `json:"started"`
	Done    bool      `json:"done"`
}

// Jobs runs calls in the background on any Executor (DESIGN §3.7): Start
// returns an id at once, Output returns new output since the previous
// read, Kill cancels the call, which stops the container. Jobs belong to
// an owner (the agent's session id; "" for calls with no agent) and are
// invisible to other owners. Ids are "bash-1", "bash-2", … per owner and
// never reused.
//
// Create Jobs with NewJobs; the zero value is not usable. A Jobs is safe
// for concurrent use. Finished jobs are kept until Remove.
type Jobs struct {
	e Executor

	mu     sync.Mutex
	owners map[string]*ownerJobs
}

type ownerJobs struct {
	next int
	jobs map[string]*job
}

type job struct {
	info   JobInfo
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	stdout jobStream
	stderr jobStream
	result *Result
	err    error
}

// jobStream is the unread output of one stream.
type jobStream struct {
	tail   tailBuffer
	unread int64
}

// NewJobs returns an empty Jobs that runs calls on e.
func NewJobs(e Executor) *Jobs {
	return &Jobs{e: e, owners: make(map[string]*ownerJobs)}
}

// Start validates req (as Prepare does, so a bad request fails here with
// ErrInvalid and never becomes a job) and runs it in the background. The
// job's context carries ctx's values but not its cancellation: the job
// outlives the caller of Start until Kill. No timeout applies unless the
// request or the policy sets one; then the policy's maximum does
// (Request.TimeoutMs cannot express "none"). req is copied; its Stdout
// and Stderr, when set, still receive the output live.
func (j *Jobs) Start(ctx context.Context, owner string, req *Request) (id string, err error) {
	call, err := Prepare(req, nil, nil)
	if err != nil {
		return "", err
	}
	r := *req
	r.CallID = call.ID
	if r.TimeoutMs == 0 && r.Policy.Limits.TimeoutMs == 0 {
		r.TimeoutMs = cmp.Or(r.Policy.Limits.MaxTimeoutMs, DefaultMaxTimeout.Milliseconds())
	}
	jb := &job{done: make(chan struct{})}
	jb.stdout.tail.max = call.TailBytes
	jb.stderr.tail.max = call.TailBytes
	r.Stdout = &jobWriter{j: jb, s: &jb.stdout, live: req.Stdout}
	r.Stderr = &jobWriter{j: jb, s: &jb.stderr, live: req.Stderr}

	jctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	jb.cancel = cancel

	j.mu.Lock()
	oj := j.owners[owner]
	if oj == nil {
		oj = &ownerJobs{jobs: make(map[string]*job)}
		j.owners[owner] = oj
	}
	oj.next++
	id = "bash-" + strconv.Itoa(oj.next)
	jb.info = JobInfo{ID: id, Command: req.Command, Started: time.Now()}
	oj.jobs[id] = jb
	j.mu.Unlock()

	go jb.run(jctx, j.e, &r)
	return id, nil
}

func (jb *job) run(ctx context.Context, e Executor, r *Request) {
	var res *Result
	var err error
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, Errorf(ErrInternal, "sandbox: job %s: executor panicked: %v", jb.info.ID, p)
		}
		if res == nil && err == nil {
			err = Errorf(ErrInternal, "sandbox: job %s: executor returned neither result nor error", jb.info.ID)
		}
		jb.mu.Lock()
		jb.result, jb.err = res, err
		jb.info.Done = true
		jb.mu.Unlock()
		close(jb.done)
		jb.cancel()
	}()
	res, err = e.Run(ctx, r)
	if err != nil {
		res = nil
	}
}

// Output returns the job's output since the previous Output or Wait and,
// once it has ended, its outcome. An unknown id, or a job of another
// owner, is an error wrapping ErrNotFound.
func (j *Jobs) Output(owner, id string) (JobOutput, error) {
	jb, err := j.find(owner, id)
	if err != nil {
		return JobOutput{}, err
	}
	return jb.read(), nil
}

// Wait blocks until the job has ended or ctx ends, then returns what
// Output would. When ctx ends first the error wraps ErrUnavailable and
// ctx's error.
func (j *Jobs) Wait(ctx context.Context, owner, id string) (JobOutput, error) {
	jb, err := j.find(owner, id)
	if err != nil {
		return JobOutput{}, err
	}
	select {
	case <-jb.done:
		return jb.read(), nil
	case <-ctx.Done():
		return JobOutput{}, Errorf(ErrUnavailable, "sandbox: wait for job %s: %w", id, ctx.Err())
	}
}

// Kill cancels the job, which stops its container (SIGTERM, grace,
// SIGKILL), and waits until it has ended or ctx ends; then the error
// wraps ErrUnavailable and ctx's error. Killing a job that has ended is
// not an error. Its output stays readable.
func (j *Jobs) Kill(ctx context.Context, owner, id string) error {
	jb, err := j.find(owner, id)
	if err != nil {
		return err
	}
	jb.cancel()
	select {
	case <-jb.done:
		return nil
	case <-ctx.Done():
		return Errorf(ErrUnavailable, "sandbox: kill job %s: %w", id, ctx.Err())
	}
}

// Remove kills the job as Kill does and forgets it; its id is not reused.
func (j *Jobs) Remove(ctx context.Context, owner, id string) error {
	if err := j.Kill(ctx, owner, id); err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if oj := j.owners[owner]; oj != nil {
		delete(oj.jobs, id)
	}
	return nil
}

// KillAll kills every job of every owner and waits until all have ended
// or ctx ends; for shutdown. Jobs stay listed.
func (j *Jobs) KillAll(ctx context.Context) error {
	j.mu.Lock()
	var all []*job
	for _, oj := range j.owners {
		for _, jb := range oj.jobs {
			all = append(all, jb)
		}
	}
	j.mu.Unlock()
	for _, jb := range all {
		jb.cancel()
	}
	for _, jb := range all {
		select {
		case <-jb.done:
		case <-ctx.Done():
			return Errorf(ErrUnavailable, "sandbox: kill all jobs: %w", ctx.Err())
		}
	}
	return nil
}

// List returns the owner's jobs in the order they were started.
func (j *Jobs) List(owner string) []JobInfo {
	j.mu.Lock()
	var jobs []*job
	if oj := j.owners[owner]; oj != nil {
		for _, jb := range oj.jobs {
			jobs = append(jobs, jb)
		}
	}
	j.mu.Unlock()
	out := make([]JobInfo, 0, len(jobs))
	for _, jb := range jobs {
		jb.mu.Lock()
		out = append(out, jb.info)
		jb.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b JobInfo) int { return jobNumber(a.ID) - jobNumber(b.ID) })
	return out
}

func (j *Jobs) find(owner, id string) (*job, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if oj := j.owners[owner]; oj != nil {
		if jb := oj.jobs[id]; jb != nil {
			return jb, nil
		}
	}
	return nil, Errorf(ErrNotFound, "sandbox: job %q not found", id)
}

func (jb *job) read() JobOutput {
	jb.mu.Lock()
	defer jb.mu.Unlock()
	o := JobOutput{ID: jb.info.ID, Done: jb.info.Done, Result: jb.result, Err: jb.err}
	o.Stdout, o.StdoutDropped = jb.stdout.take()
	o.Stderr, o.StderrDropped = jb.stderr.take()
	return o
}

// take returns the unread bytes and how many unread bytes were dropped,
// and marks everything read. Called with the job's mutex held.
func (s *jobStream) take() (string, int64) {
	text := s.tail.String()
	dropped := s.unread - int64(len(text))
	s.tail.reset()
	s.unread = 0
	return text, dropped
}

// jobWriter feeds one stream of a job and the caller's live writer.
type jobWriter struct {
	j    *job
	s    *jobStream
	live io.Writer
}

func (w *jobWriter) Write(p []byte) (int, error) {
	w.j.mu.Lock()
	w.s.tail.write(p)
	w.s.unread += int64(len(p))
	w.j.mu.Unlock()
	if w.live != nil {
		_, _ = w.live.Write(p)
	}
	return len(p), nil
}

func jobNumber(id string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(id, "bash-"))
	return n
}
