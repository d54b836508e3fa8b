package jobs

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/redact"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/capture"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/prepare"
)

// ErrLimit is wrapped (with ErrUnavailable) by the error of a Start
// that would exceed Options.MaxLivePerOwner.
var ErrLimit = errors.New("too many live jobs")

// Options configure Runner. The zero value means no limits.
type Options struct {
	// MaxLivePerOwner bounds the jobs of one owner that have not ended
	// (running or waiting); Start beyond it fails with ErrLimit.
	// 0 means no bound.
	MaxLivePerOwner int
	// TTL is how long a job is kept after it has ended; then it is
	// forgotten as Remove does, read or not. 0 keeps ended jobs until
	// Remove.
	TTL time.Duration
}

// Runner runs calls in the background on any sandbox.Executor (DESIGN §3.7): Start
// returns an id at once, Output returns new output since the previous
// read, Kill cancels the call, which stops the container. Runner belong to
// an owner (an opaque key: the service uses the client and the agent's
// session id) and are invisible to other owners. Ids are "bash-" and 16
// random hex digits, so one owner cannot guess another's.
//
// Create Runner with New or NewWith; the zero value is not usable. A
// Runner is safe for concurrent use. Ended jobs are kept until Remove or
// until Options.TTL has passed.
type Runner struct {
	e    sandbox.Executor
	opts Options

	mu     sync.Mutex
	seq    uint64
	owners map[string]*ownerJobs
}

type ownerJobs struct {
	jobs map[string]*job
}

type job struct {
	info   sandbox.JobInfo
	seq    uint64 // start order, for List
	cancel context.CancelFunc
	done   chan struct{}

	mu     sync.Mutex
	stdout jobStream
	stderr jobStream
	result *sandbox.Result
	err    error
}

// jobStream is the unread output of one stream.
type jobStream struct {
	tail   capture.Tail
	unread int64
}

// New returns an empty Runner without limits that runs calls on e.
func New(e sandbox.Executor) *Runner { return NewWith(e, Options{}) }

// NewWith returns an empty Runner with the given limits that runs calls
// on e.
func NewWith(e sandbox.Executor, opts Options) *Runner {
	return &Runner{e: e, opts: opts, owners: make(map[string]*ownerJobs)}
}

// newJobID returns "bash-" and 16 random hex digits.
func newJobID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails; see crypto/rand.Read
	return "bash-" + hex.EncodeToString(b)
}

// startCheck is the pattern detector Start validates a request with
// (prepare.Call); it finds nothing. Start never redacts with that call:
// the executor redacts the job's output with its own detector, and
// refuses a policy that sets redact.detectors when it has none (the job
// then ends with that error, having run nothing).
type startCheck struct{}

func (startCheck) Find([]byte) []redact.Finding { return nil }

// Start validates req (as Prepare does, so a bad request fails here with
// ErrInvalid and never becomes a job) and runs it in the background. The
// job's context carries ctx's values but not its cancellation: the job
// outlives the caller of Start until Kill. The foreground timeout
// (Request.TimeoutMs, the policy's timeoutMs and maxTimeoutMs) does not
// apply: a job's only deadline is the policy's limits.jobTimeoutMs, none
// when it is 0 (Request.Background), and a job it stops ends timed out.
// Runner stay bounded by MaxLivePerOwner and TTL. req is copied; its
// Stdout and Stderr, when set, still receive the output live.
func (j *Runner) Start(ctx context.Context, owner string, req *sandbox.Request) (id string, err error) {
	call, err := prepare.Call(req, nil, nil, startCheck{})
	if err != nil {
		return "", err
	}
	r := *req
	r.CallID = call.ID
	r.Background = true
	jb := &job{done: make(chan struct{})}
	jb.stdout.tail.Max = call.TailBytes
	jb.stderr.tail.Max = call.TailBytes
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
		return "", sandbox.Errorf(sandbox.ErrUnavailable, "sandbox: %d jobs of this session have not ended (the limit): %w", max, ErrLimit)
	}
	for id == "" || oj.jobs[id] != nil {
		id = newJobID()
	}
	j.seq++
	jb.seq = j.seq
	jb.info = sandbox.JobInfo{ID: id, Command: req.Command, Started: time.Now()}
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

// live counts the jobs that have not ended. Called with Runner.mu held.
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
func (j *Runner) forget(owner, id string, jb *job) {
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

func (jb *job) run(ctx context.Context, e sandbox.Executor, r *sandbox.Request) {
	var res *sandbox.Result
	var err error
	defer func() {
		if p := recover(); p != nil {
			res, err = nil, sandbox.Errorf(sandbox.ErrInternal, "sandbox: job %s: executor panicked: %v", jb.info.ID, p)
		}
		if res == nil && err == nil {
			err = sandbox.Errorf(sandbox.ErrInternal, "sandbox: job %s: executor returned neither result nor error", jb.info.ID)
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
func (j *Runner) Output(owner, id string) (sandbox.JobOutput, error) {
	jb, err := j.find(owner, id)
	if err != nil {
		return sandbox.JobOutput{}, err
	}
	return jb.read(), nil
}

// Wait blocks until the job has ended or ctx ends, then returns what
// Output would. When ctx ends first the error wraps ErrUnavailable and
// ctx's error.
func (j *Runner) Wait(ctx context.Context, owner, id string) (sandbox.JobOutput, error) {
	jb, err := j.find(owner, id)
	if err != nil {
		return sandbox.JobOutput{}, err
	}
	select {
	case <-jb.done:
		return jb.read(), nil
	case <-ctx.Done():
		return sandbox.JobOutput{}, sandbox.Errorf(sandbox.ErrUnavailable, "sandbox: wait for job %s: %w", id, ctx.Err())
	}
}

// Kill cancels the job, which stops its container (SIGTERM, grace,
// SIGKILL), and waits until it has ended or ctx ends; then the error
// wraps ErrUnavailable and ctx's error. Killing a job that has ended is
// not an error. Its output stays readable.
func (j *Runner) Kill(ctx context.Context, owner, id string) error {
	jb, err := j.find(owner, id)
	if err != nil {
		return err
	}
	jb.cancel()
	select {
	case <-jb.done:
		return nil
	case <-ctx.Done():
		return sandbox.Errorf(sandbox.ErrUnavailable, "sandbox: kill job %s: %w", id, ctx.Err())
	}
}

// Remove kills the job as Kill does and forgets it.
func (j *Runner) Remove(ctx context.Context, owner, id string) error {
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
// or ctx ends; for shutdown. Runner stay listed.
func (j *Runner) KillAll(ctx context.Context) error {
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
			return sandbox.Errorf(sandbox.ErrUnavailable, "sandbox: kill all jobs: %w", ctx.Err())
		}
	}
	return nil
}

// List returns the owner's jobs in the order they were started.
func (j *Runner) List(owner string) []sandbox.JobInfo {
	j.mu.Lock()
	var jobs []*job
	if oj := j.owners[owner]; oj != nil {
		for _, jb := range oj.jobs {
			jobs = append(jobs, jb)
		}
	}
	j.mu.Unlock()
	slices.SortFunc(jobs, func(a, b *job) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]sandbox.JobInfo, 0, len(jobs))
	for _, jb := range jobs {
		jb.mu.Lock()
		out = append(out, jb.info)
		jb.mu.Unlock()
	}
	return out
}

func (j *Runner) find(owner, id string) (*job, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if oj := j.owners[owner]; oj != nil {
		if jb := oj.jobs[id]; jb != nil {
			return jb, nil
		}
	}
	return nil, sandbox.Errorf(sandbox.ErrNotFound, "sandbox: job %q not found", id)
}

func (jb *job) read() sandbox.JobOutput {
	jb.mu.Lock()
	defer jb.mu.Unlock()
	o := sandbox.JobOutput{ID: jb.info.ID, Done: jb.info.Done, Result: jb.result, Err: jb.err}
	o.Stdout, o.StdoutDropped = jb.stdout.take()
	o.Stderr, o.StderrDropped = jb.stderr.take()
	return o
}

// take returns the unread bytes and how many unread bytes were dropped,
// and marks everything read. Called with the job's mutex held.
func (s *jobStream) take() (string, int64) {
	text := s.tail.String()
	dropped := s.unread - int64(len(text))
	s.tail.Reset()
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
	w.s.tail.Add(p)
	w.s.unread += int64(len(p))
	w.j.mu.Unlock()
	if w.live != nil {
		_, _ = w.live.Write(p)
	}
	return len(p), nil
}
