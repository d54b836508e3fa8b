package sandbox

import (
	"cmp"
	"context"
	"errors"
	"io"
	"slices"
	"sync"
	"time"
)

// ErrJobLimit is wrapped (with ErrUnavailable) by the error of a Start
// that would exceed JobsOptions.MaxLivePerOwner.
var ErrJobLimit = errors.New("too many live jobs")

// JobsOptions configure Jobs. The zero value means no limits.
type JobsOptions struct {
	// MaxLivePerOwner bounds the jobs of one owner that have not ended
	// (running or waiting); Start beyond it fails with ErrJobLimit.
	// 0 means no bound.
	MaxLivePerOwner int
	// TTL is how long a job is kept after it has ended; then it is
	// forgotten as Remove does, read or not. 0 keeps ended jobs until
	// Remove.
	TTL time.Duration
}

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
// an owner (an opaque key: the service uses the client and the agent's
// session id) and are invisible to other owners. Ids are "bash-" and 16
// random hex digits, so one owner cannot guess another's.
//
// Create Jobs with NewJobs or NewJobsWith; the zero value is not usable. A
// Jobs is safe for concurrent use. Ended jobs are kept until Remove or
// until JobsOptions.TTL has passed.
type Jobs struct {
	e    Executor
	opts JobsOptions

	mu     sync.Mutex
	seq    uint64
	owners map[string]*ownerJobs
}

type ownerJobs struct {
	jobs map[string]*job
}

type job struct {
	info   JobInfo
	seq    uint64 // start order, for List
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

// NewJobs returns an empty Jobs without limits that runs calls on e.
func NewJobs(e Executor) *Jobs { return NewJobsWith(e, JobsOptions{}) }

// NewJobsWith returns an empty Jobs with the given limits that runs calls
// on e.
func NewJobsWith(e Executor, opts JobsOptions) *Jobs {
	return &Jobs{e: e, opts: opts, owners: make(map[string]*ownerJobs)}
}

// newJobID returns "bash-" and 16 random hex digits.
func newJobID() string { return "bash-" + randomHex(8) }

// Start validates req (as Prepare does, so a bad request fails here with
// ErrInvalid and never becomes a job) and runs it in the background. The
// job's context carries ctx's values but not its cancellation: the job
// outlives the caller of Start until Kill. The foreground timeout
// (Request.TimeoutMs, the policy's timeoutMs and maxTimeoutMs) does not
// apply: a job's only deadline is the policy's limits.jobTimeoutMs, none
// when it is 0 (Request.Background), and a job it stops ends timed out.
// Jobs stay bounded by MaxLivePerOwner and TTL. req is copied; its
// Stdout and Stderr, when set, still receive the output live.
func (j *Jobs) Start(ctx context.Context, owner string, req *Request) (id string, err error) {
	call, err := Prepare(req, nil, nil)
	if err != nil {
		return "", err
	}
	r := *req
	r.CallID = call.ID
	r.Background = true
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
	if max := j.opts.MaxLivePerOwner; max > 0 && oj.live() >= max {
		j.mu.Unlock()
		cancel()
		return "", Errorf(ErrUnavailable, "sandbox: %d jobs of this session have not ended (the limit): %w", max, ErrJobLimit)
	}
	for id == "" || oj.jobs[id] != nil {
		id = newJobID()
	}
	j.seq++
	jb.seq = j.seq
	jb.info = JobInfo{ID: id, Command: req.Command, Started: time.Now()}
	oj.jobs[id] = jb
	j.mu.Unlock()

	go func() {
		jb.run(jctx, j.e, &r)
		if j.opts.TTL > 0 {
			time.AfterFunc(j.opts.TTL, func() { j.forget(owner, id, jb) })
		}
	}()
	return id, nil
}

// live counts the jobs that have not ended. Called with Jobs.mu held.
func (oj *ownerJobs) live() int {
	n := 0
	for _, jb := range oj.jobs {
		select {
		case <-jb.done:
		default:
			n++
		}
	}
	return n
}

// forget drops the job id of owner if it is still jb.
func (j *Jobs) forget(owner, id string, jb *job) {
	j.mu.Lock()
	defer j.mu.Unlock()
	oj := j.owners[owner]
	if oj == nil || oj.jobs[id] != jb {
		return
	}
	delete(oj.jobs, id)
	if len(oj.jobs) == 0 {
		delete(j.owners, owner)
	}
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

// Remove kills the job as Kill does and forgets it.
func (j *Jobs) Remove(ctx context.Context, owner, id string) error {
	jb, err := j.find(owner, id)
	if err != nil {
		return err
	}
	if err := j.Kill(ctx, owner, id); err != nil {
		return err
	}
	j.forget(owner, id, jb)
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
	slices.SortFunc(jobs, func(a, b *job) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]JobInfo, 0, len(jobs))
	for _, jb := range jobs {
		jb.mu.Lock()
		out = append(out, jb.info)
		jb.mu.Unlock()
	}
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
