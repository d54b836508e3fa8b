package jobs

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/prepare"
)

// fakeExecutor is a hand-written Executor whose behaviour each test sets.
type fakeExecutor struct {
	run func(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error)

	mu   sync.Mutex
	reqs []sandbox.Request
}

func (f *fakeExecutor) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, *req)
	f.mu.Unlock()
	return f.run(ctx, req)
}

func (f *fakeExecutor) requests() []sandbox.Request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

// untilCancelled writes out, then blocks until ctx ends and reports an
// abort, as a backend does when Supervise stops the container.
func untilCancelled(out string) func(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	return func(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
		req.Stdout.Write([]byte(out))
		<-ctx.Done()
		return &sandbox.Result{Aborted: true, Signal: "SIGTERM"}, nil
	}
}

func jobRequest(cmd string) *sandbox.Request {
	r := calls.Request()
	r.Command = cmd
	return r
}

var jobIDPattern = regexp.MustCompile(`^bash-[0-9a-f]{16}$`)

func TestJobsIDsAreRandom(t *testing.T) {
	f := &fakeExecutor{run: untilCancelled("")}
	j := New(f)
	defer j.KillAll(context.Background())
	seen := map[string]bool{}
	for _, owner := range []string{"s1", "s1", "s2", "s1", ""} {
		id, err := j.Start(t.Context(), owner, jobRequest("sleep 1"))
		if err != nil {
			t.Fatal(err)
		}
		if !jobIDPattern.MatchString(id) || seen[id] {
			t.Errorf("Start(%q) id = %q, want a new bash-<16 hex digits>", owner, id)
		}
		seen[id] = true
	}
	if l := j.List("s1"); len(l) != 3 {
		t.Errorf("List(s1) = %+v, want the 3 jobs of s1", l)
	}
}

func TestJobsMaxLivePerOwner(t *testing.T) {
	release := make(chan struct{})
	f := &fakeExecutor{run: func(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
		if req.Command == "quick" {
			<-release
			return &sandbox.Result{ExitCode: exit(0)}, nil
		}
		<-ctx.Done()
		return &sandbox.Result{Aborted: true}, nil
	}}
	j := NewWith(f, Options{MaxLivePerOwner: 2})
	defer j.KillAll(context.Background())
	quick, err := j.Start(t.Context(), "s", jobRequest("quick"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Start(t.Context(), "s", jobRequest("slow")); err != nil {
		t.Fatal(err)
	}
	if id, err := j.Start(t.Context(), "s", jobRequest("slow")); !errors.Is(err, ErrLimit) || !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("third live job of s = %q, %v; want ErrLimit", id, err)
	}
	if _, err := j.Start(t.Context(), "other", jobRequest("slow")); err != nil {
		t.Errorf("first job of another owner = %v, want it started (the cap is per owner)", err)
	}
	close(release)
	if _, err := j.Wait(t.Context(), "s", quick); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Start(t.Context(), "s", jobRequest("slow")); err != nil {
		t.Errorf("a job of s after one ended = %v, want it started (ended jobs do not count)", err)
	}
}

func TestJobsTTLForgetsEndedJobs(t *testing.T) {
	f := &fakeExecutor{run: func(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
		if req.Command == "quick" {
			return &sandbox.Result{ExitCode: exit(0)}, nil
		}
		<-ctx.Done()
		return &sandbox.Result{Aborted: true}, nil
	}}
	j := NewWith(f, Options{TTL: time.Millisecond})
	defer j.KillAll(context.Background())
	slow, err := j.Start(t.Context(), "s", jobRequest("slow"))
	if err != nil {
		t.Fatal(err)
	}
	quick, err := j.Start(t.Context(), "s", jobRequest("quick"))
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := j.Output("s", quick); errors.Is(err, sandbox.ErrNotFound) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if l := j.List("s"); len(l) != 1 || l[0].ID != slow {
		t.Errorf("List after the TTL = %+v, want only the running %s", l, slow)
	}
}

func TestJobsOutputIncremental(t *testing.T) {
	step, ack := make(chan string), make(chan struct{})
	f := &fakeExecutor{run: func(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
		for s := range step {
			out, errOut, _ := strings.Cut(s, "|")
			req.Stdout.Write([]byte(out))
			req.Stderr.Write([]byte(errOut))
			ack <- struct{}{}
		}
		return &sandbox.Result{ExitCode: exit(7)}, nil
	}}
	j := New(f)
	id, err := j.Start(t.Context(), "s", jobRequest("make"))
	if err != nil {
		t.Fatal(err)
	}
	read := func() sandbox.JobOutput {
		t.Helper()
		o, err := j.Output("s", id)
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if o := read(); o.Stdout != "" || o.Done {
		t.Errorf("Output before any output = %+v, want empty, not done", o)
	}
	send := func(s string) { step <- s; <-ack }
	send("one\n|warn\n")
	send("two\n|")
	if o := read(); o.Stdout != "one\ntwo\n" || o.Stderr != "warn\n" || o.Done {
		t.Errorf("Output = %+v, want one, two and warn, not done", o)
	}
	send("three\n|")
	if o := read(); o.Stdout != "three\n" || o.Stderr != "" {
		t.Errorf("second Output = %+v, want only the new \"three\"", o)
	}
	send("last|")
	close(step)
	o, err := j.Wait(t.Context(), "s", id)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Done || o.Stdout != "last" || o.Result == nil || *o.Result.ExitCode != 7 || o.Err != nil {
		t.Errorf("Wait() = %+v, want done with the last output and exit code 7", o)
	}
	if o := read(); o.Stdout != "" || !o.Done || o.Result == nil {
		t.Errorf("Output after the end = %+v, want no new output, done, result", o)
	}
}

func TestJobsUnreadOutputIsBounded(t *testing.T) {
	f := &fakeExecutor{run: func(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
		for range 100 {
			req.Stdout.Write([]byte("0123456789"))
		}
		req.Stderr.Write([]byte("e"))
		return &sandbox.Result{ExitCode: exit(0)}, nil
	}}
	j := New(f)
	req := jobRequest("yes")
	req.StdoutMaxBytes = 64
	id, err := j.Start(t.Context(), "s", req)
	if err != nil {
		t.Fatal(err)
	}
	o, err := j.Wait(t.Context(), "s", id)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("0123456789", 100)[1000-64:]
	if o.Stdout != want || o.StdoutDropped != 1000-64 || o.Stderr != "e" || o.StderrDropped != 0 {
		t.Errorf("Output = %q (dropped %d), %q (dropped %d), want the last 64 bytes (dropped 936), \"e\" (0)",
			o.Stdout, o.StdoutDropped, o.Stderr, o.StderrDropped)
	}
}

func TestJobsKill(t *testing.T) {
	f := &fakeExecutor{run: untilCancelled("started\n")}
	j := New(f)
	id, err := j.Start(t.Context(), "s", jobRequest("sleep 100"))
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Kill(t.Context(), "s", id); err != nil {
		t.Fatalf("Kill() = %v", err)
	}
	o, err := j.Output("s", id)
	if err != nil {
		t.Fatal(err)
	}
	if !o.Done || o.Result == nil || !o.Result.Aborted || o.Stdout != "started\n" {
		t.Errorf("Output after Kill = %+v, want done, aborted, with the output", o)
	}
	if err := j.Kill(t.Context(), "s", id); err != nil {
		t.Errorf("Kill() of an ended job = %v, want nil", err)
	}
}

func TestJobsOutliveStartContext(t *testing.T) {
	release := make(chan struct{})
	f := &fakeExecutor{run: func(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
		select {
		case <-release:
			return &sandbox.Result{ExitCode: exit(0)}, nil
		case <-ctx.Done():
			return &sandbox.Result{Aborted: true, Signal: "SIGTERM"}, nil
		}
	}}
	j := New(f)
	ctx, cancel := context.WithCancel(context.WithValue(t.Context(), ctxKey{}, "v"))
	id, err := j.Start(ctx, "s", jobRequest("sleep 1"))
	if err != nil {
		t.Fatal(err)
	}
	cancel() // the caller of Start (e.g. an HTTP request) is gone
	close(release)
	o, err := j.Wait(t.Context(), "s", id)
	if err != nil {
		t.Fatal(err)
	}
	if o.Result == nil || o.Result.Aborted || *o.Result.ExitCode != 0 {
		t.Errorf("job after its Start context ended = %+v, want it to run to completion", o.Result)
	}
}

type ctxKey struct{}

func TestJobsNotFound(t *testing.T) {
	f := &fakeExecutor{run: untilCancelled("secret of s1\n")}
	j := New(f)
	defer j.KillAll(context.Background())
	id, err := j.Start(t.Context(), "s1", jobRequest("cat secrets"))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name string
		err  error
	}{
		{"Output other owner", second(j.Output("s2", id))},
		{"Output unknown id", second(j.Output("s1", "bash-0000000000000009"))},
		{"Wait other owner", second(j.Wait(t.Context(), "s2", id))},
		{"Kill other owner", j.Kill(t.Context(), "s2", id)},
		{"Remove other owner", j.Remove(t.Context(), "s2", id)},
	}
	for _, c := range checks {
		if !errors.Is(c.err, sandbox.ErrNotFound) {
			t.Errorf("%s: error = %v, want ErrNotFound", c.name, c.err)
		}
	}
	if l := j.List("s2"); len(l) != 0 {
		t.Errorf("List(s2) = %+v, want nothing of s1", l)
	}
	if o, _ := j.Output("s1", id); o.Done {
		t.Errorf("job of s1 ended after another owner tried to kill it")
	}
}

func second[T any](_ T, err error) error { return err }

func TestJobsStartInvalid(t *testing.T) {
	f := &fakeExecutor{run: untilCancelled("")}
	j := New(f)
	for _, req := range []*sandbox.Request{
		nil,
		{Command: "", Policy: calls.Policy()},
		{Command: "x", Policy: calls.Policy(), TimeoutMs: -1},
		{Command: "x", Policy: calls.Policy(), Env: []string{"A=\x00"}},
		{Command: "x", Policy: calls.Policy(), Workdir: "rel"},
	} {
		if id, err := j.Start(t.Context(), "s", req); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Start(%+v) = %q, %v, want ErrInvalid", req, id, err)
		}
	}
	if len(f.requests()) != 0 || len(j.List("s")) != 0 {
		t.Errorf("invalid requests reached the executor (%d) or became jobs (%d)", len(f.requests()), len(j.List("s")))
	}
}

// TestJobsStartLeavesDetectorsToExecutor: Start has no pattern detector
// and needs none: a request whose policy sets RedactDetectors becomes a
// job, which the executor redacts (with its detector) or refuses (having
// none); its refusal is the job's end.
func TestJobsStartLeavesDetectorsToExecutor(t *testing.T) {
	refusal := sandbox.Errorf(sandbox.ErrUnavailable, "sandbox: policy redact.detectors is set, but this program has no pattern detector")
	for _, want := range []error{nil, refusal} {
		f := &fakeExecutor{run: func(context.Context, *sandbox.Request) (*sandbox.Result, error) {
			if want != nil {
				return nil, want
			}
			return &sandbox.Result{ExitCode: exit(0)}, nil
		}}
		j := New(f)
		req := jobRequest("x")
		req.Policy.RedactDetectors = true
		id, err := j.Start(t.Context(), "s", req)
		if err != nil {
			t.Fatalf("Start under redact.detectors = %v, want a job", err)
		}
		o, err := j.Wait(t.Context(), "s", id)
		if err != nil {
			t.Fatal(err)
		}
		if reqs := f.requests(); len(reqs) != 1 || !reqs[0].Policy.RedactDetectors || o.Err != want {
			t.Errorf("the executor got %d requests; the job ended with %v, want %v", len(reqs), o.Err, want)
		}
	}
}

func TestJobsRequestPassedOn(t *testing.T) {
	// The deadline a backend applies is Prepare's Call.Timeout.
	var deadline time.Duration
	f := &fakeExecutor{run: func(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
		c, err := prepare.Call(req, nil, nil, nil)
		if err != nil {
			return nil, err
		}
		deadline = c.Timeout
		req.Stdout.Write([]byte("o"))
		req.Stderr.Write([]byte("e"))
		return &sandbox.Result{ExitCode: exit(0)}, nil
	}}
	j := New(f)
	var liveOut, liveErr bytes.Buffer
	tests := []struct {
		name         string
		mutate       func(r *sandbox.Request)
		wantDeadline time.Duration
	}{
		{"no job timeout: none", func(r *sandbox.Request) {}, 0},
		{"the foreground timeout does not apply", func(r *sandbox.Request) { r.Policy.Limits.TimeoutMs = 5000 }, 0},
		{"nor the foreground maximum", func(r *sandbox.Request) { r.Policy.Limits.MaxTimeoutMs = 900_000 }, 0},
		{"nor the request's timeout", func(r *sandbox.Request) { r.TimeoutMs = 1000 }, 0},
		{"the policy's job timeout applies", func(r *sandbox.Request) { r.Policy.Limits.JobTimeoutMs = 7_200_000; r.TimeoutMs = 1000 }, 2 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			liveOut.Reset()
			liveErr.Reset()
			req := jobRequest("x")
			tt.mutate(req)
			req.Stdout, req.Stderr = &liveOut, &liveErr
			orig := *req
			id, err := j.Start(t.Context(), "s", req)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := j.Wait(t.Context(), "s", id); err != nil {
				t.Fatal(err)
			}
			reqs := f.requests()
			got := reqs[len(reqs)-1]
			if !got.Background || deadline != tt.wantDeadline {
				t.Errorf("executor got Background %t and a deadline of %v, want a background call with %v", got.Background, deadline, tt.wantDeadline)
			}
			if fg, _ := prepare.Call(&orig, nil, nil, nil); fg.Timeout == 0 {
				t.Errorf("the same request in the foreground has no deadline")
			}
			if !sandbox.ValidCallID(got.CallID) {
				t.Errorf("executor got CallID %q, want a valid id", got.CallID)
			}
			if req.TimeoutMs != orig.TimeoutMs || req.CallID != orig.CallID || req.Stdout != orig.Stdout {
				t.Errorf("Start modified the caller's request")
			}
			if liveOut.String() != "o" || liveErr.String() != "e" {
				t.Errorf("live writers got %q, %q, want \"o\", \"e\"", liveOut.String(), liveErr.String())
			}
		})
	}
}

func TestJobsExecutorFailure(t *testing.T) {
	tests := []struct {
		name string
		run  func(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error)
		want error
	}{
		{"error", func(context.Context, *sandbox.Request) (*sandbox.Result, error) {
			return nil, sandbox.Errorf(sandbox.ErrUnavailable, "runc: not installed")
		}, sandbox.ErrUnavailable},
		{"error with a result", func(context.Context, *sandbox.Request) (*sandbox.Result, error) {
			return &sandbox.Result{}, sandbox.Errorf(sandbox.ErrNotFound, "image x")
		}, sandbox.ErrNotFound},
		{"neither", func(context.Context, *sandbox.Request) (*sandbox.Result, error) { return nil, nil }, sandbox.ErrInternal},
		{"panic", func(context.Context, *sandbox.Request) (*sandbox.Result, error) { panic("boom") }, sandbox.ErrInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := New(&fakeExecutor{run: tt.run})
			id, err := j.Start(t.Context(), "s", jobRequest("x"))
			if err != nil {
				t.Fatal(err)
			}
			o, err := j.Wait(t.Context(), "s", id)
			if err != nil {
				t.Fatal(err)
			}
			if !o.Done || o.Result != nil || !errors.Is(o.Err, tt.want) {
				t.Errorf("Wait() = %+v, want done, no result, error wrapping %v", o, tt.want)
			}
		})
	}
}

func TestJobsListRemove(t *testing.T) {
	quick := make(chan struct{})
	f := &fakeExecutor{run: func(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
		if req.Command == "quick" {
			<-quick
			return &sandbox.Result{ExitCode: exit(0)}, nil
		}
		<-ctx.Done()
		return &sandbox.Result{Aborted: true}, nil
	}}
	j := New(f)
	defer j.KillAll(context.Background())
	var ids []string
	for _, c := range []string{"slow", "quick", "slow"} {
		id, err := j.Start(t.Context(), "s", jobRequest(c))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	close(quick)
	if _, err := j.Wait(t.Context(), "s", ids[1]); err != nil {
		t.Fatal(err)
	}
	type row struct {
		id, cmd string
		done    bool
	}
	rows := func() []row {
		var r []row
		for _, i := range j.List("s") {
			if i.Started.IsZero() {
				t.Errorf("List: job %s has no start time", i.ID)
			}
			r = append(r, row{i.ID, i.Command, i.Done})
		}
		return r
	}
	want := []row{{ids[0], "slow", false}, {ids[1], "quick", true}, {ids[2], "slow", false}}
	if got := rows(); !slices.Equal(got, want) {
		t.Errorf("List() = %v, want %v (start order)", got, want)
	}
	if err := j.Remove(t.Context(), "s", ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := j.Output("s", ids[0]); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Output of a removed job: %v, want ErrNotFound", err)
	}
	id, _ := j.Start(t.Context(), "s", jobRequest("slow"))
	if slices.Contains(ids, id) || !jobIDPattern.MatchString(id) {
		t.Errorf("Start after Remove = %q, want a new random id", id)
	}
	if err := j.KillAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows() {
		if !r.done {
			t.Errorf("after KillAll job %s is not done", r.id)
		}
	}
}

func TestJobsWaitCancelled(t *testing.T) {
	j := New(&fakeExecutor{run: untilCancelled("")})
	defer j.KillAll(context.Background())
	id, _ := j.Start(t.Context(), "s", jobRequest("sleep"))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := j.Wait(ctx, "s", id); !errors.Is(err, sandbox.ErrUnavailable) || !errors.Is(err, context.Canceled) {
		t.Errorf("Wait(cancelled) = %v, want ErrUnavailable wrapping context.Canceled", err)
	}
	unstick := make(chan struct{})
	defer close(unstick)
	stuck := New(&fakeExecutor{run: func(context.Context, *sandbox.Request) (*sandbox.Result, error) {
		<-unstick // ignores cancellation: Kill must not hang
		return nil, nil
	}})
	id, _ = stuck.Start(t.Context(), "s", jobRequest("sleep"))
	if err := stuck.Kill(ctx, "s", id); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("Kill(cancelled) of a stuck job = %v, want ErrUnavailable", err)
	}
}

func exit(n int) *int { return &n }
