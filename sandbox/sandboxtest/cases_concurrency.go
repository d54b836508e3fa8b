package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/jobs"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// jobID is the form of a job id: random, so one owner cannot guess
// another's.
var jobID = regexp.MustCompile(`^bash-[0-9a-f]{16}$`)

// concurrencyCases check concurrent calls of different sessions and
// background jobs.
func concurrencyCases() []testCase {
	return []testCase{
		{name: "parallel-sessions-32", run: testParallelSessions},
		{name: "jobs-start-output-kill", run: testJobsStartOutputKill},
		{name: "jobs-owner-isolation", run: testJobsOwnerIsolation},
	}
}

// testParallelSessions: 32 calls of 32 sessions at once each see their
// own session id, transcript path and transcript.
func testParallelSessions(t *testing.T, s *suite) {
	const n = 32
	fxs := make([]*fixture, n)
	for i := range fxs {
		fxs[i] = newFixture(t)
	}
	var wg sync.WaitGroup
	for i, fx := range fxs {
		wg.Go(func() {
			req := s.request(fx, `printf '%s\n%s\n' "$DSH_SESSION_ID" "$DSH_SESSION_JSONL"; cat "$DSH_SESSION_JSONL"`)
			req.Policy.Transcript = "ro"
			res, err := s.runCtx(t.Context(), req)
			if err != nil {
				t.Errorf("call %d: Run error = %v", i, err)
				return
			}
			want := fx.SessionID + "\n" + fx.JSONL + "\n" + string(fx.Header)
			if res.ExitCode == nil || *res.ExitCode != 0 || res.Stdout.Text != want {
				t.Errorf("call %d of session %s = %s, want exit 0 and stdout %q", i, fx.SessionID, describe(res), want)
			}
		})
	}
	wg.Wait()
}

// jobDeadline bounds how long a job case waits for a job.
const jobDeadline = 2 * time.Minute

// waitLive returns a live writer for a job and a channel closed once the
// job's output contains trigger.
func waitLive(trigger string) (*watchWriter, <-chan struct{}) {
	ch := make(chan struct{})
	return newWatchWriter(trigger, func() { close(ch) }), ch
}

// await fails the case unless ch is closed within jobDeadline.
func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(jobDeadline):
		t.Fatalf("gave up waiting for %s", what)
	}
}

// testJobsStartOutputKill: background jobs over the executor get random
// ids (bash-<16 hex>); Output returns only new output; Wait and Kill end
// them; a killed job leaves no process behind.
func testJobsStartOutputKill(t *testing.T, s *suite) {
	fx := newFixture(t)
	runner := jobs.New(s.exec)
	owner := fx.SessionID
	ctx := t.Context()
	t.Cleanup(func() {
		kctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
		defer cancel()
		if err := runner.KillAll(kctx); err != nil {
			t.Errorf("KillAll: %v", err)
		}
	})

	bad := s.request(fx, "true")
	bad.TimeoutMs = -1
	if id, err := runner.Start(ctx, owner, bad); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("Start(negative timeout) = %q, %v; want an ErrInvalid error", id, err)
	}

	marker := newMarker()
	id1 := startFirstJob(ctx, t, s, runner, fx, marker)

	wctx, cancel := context.WithTimeout(ctx, jobDeadline)
	defer cancel()
	id2 := waitSecondJob(ctx, wctx, t, s, runner, fx, id1)

	var ids []string
	for _, j := range runner.List(owner) {
		ids = append(ids, fmt.Sprintf("%s:%v", j.ID, j.Done))
	}
	if want := []string{id1 + ":false", id2 + ":true"}; !slices.Equal(ids, want) {
		// How the first job ended, if it did, tells what ended it.
		first, err := runner.Output(owner, id1)
		t.Errorf("List(owner) = %q, want %q (bash-1: {Stdout: %q, Stderr: %q, Result: %s, Err: %v}, %v)", ids, want, first.Stdout, first.Stderr, describe(first.Result), first.Err, err)
	}

	if err := runner.Kill(wctx, owner, id1); err != nil {
		t.Fatalf("Kill(bash-1) = %v", err)
	}
	out, err := runner.Output(owner, id1)
	if err != nil || !out.Done || out.Result == nil || out.Result.ExitCode != nil || strings.Contains(out.Stdout, "after-sleep") {
		t.Errorf("Output(bash-1) after Kill = {Stdout: %q, Done: %v, Result: %s, Err: %v}, %v; want done, killed", out.Stdout, out.Done, describe(out.Result), out.Err, err)
	}
	checkNoSurvivors(t, marker)
}

// startFirstJob starts the first job of testJobsStartOutputKill for the
// fixture's session: it prints to stdout and stderr, then sleeps (as
// marker) until killed. It checks that the job's id is random, that
// Output returns what the job printed and then no new output, and
// returns the id.
func startFirstJob(ctx context.Context, t *testing.T, s *suite, runner *jobs.Runner, fx *fixture, marker string) string {
	owner := fx.SessionID
	long := s.request(fx, "echo first; echo err1 >&2; echo ready; sleep "+marker+"; echo after-sleep")
	long.TimeoutMs = 0
	live, ready := waitLive("ready")
	long.Stdout = live
	id1, err := runner.Start(ctx, owner, long)
	if err != nil || !jobID.MatchString(id1) {
		t.Fatalf("Start(first job) = %q, %v; want bash-<16 hex>, nil", id1, err)
	}
	await(t, ready, "the first job to print ready")
	out, err := runner.Output(owner, id1)
	if err != nil || out.Done || out.Stdout != "first\nready\n" {
		t.Errorf("Output(bash-1) = {Stdout: %q, Done: %v}, %v; want %q, not done", out.Stdout, out.Done, err, "first\nready\n")
	}
	if out.Stderr != "err1\n" {
		// stderr may trail stdout by a moment; wait for it without asserting time.
		if !waitFor(jobDeadline, func() bool {
			o, _ := runner.Output(owner, id1)
			out.Stderr += o.Stderr
			return out.Stderr == "err1\n"
		}) {
			t.Errorf("stderr of bash-1 = %q, want %q", out.Stderr, "err1\n")
		}
	}
	if again, err := runner.Output(owner, id1); err != nil || again.Stdout != "" || again.Stderr != "" || again.Done {
		t.Errorf("second Output(bash-1) = {Stdout: %q, Stderr: %q, Done: %v}, %v; want no new output, not done", again.Stdout, again.Stderr, again.Done, err)
	}
	return id1
}

// waitSecondJob starts the second job of testJobsStartOutputKill for
// the fixture's session (started with ctx), waits for it (with wctx) and
// checks that it got an id of its own, other than id1, and ended with
// its output and exit code 7. It returns the id.
func waitSecondJob(ctx, wctx context.Context, t *testing.T, s *suite, runner *jobs.Runner, fx *fixture, id1 string) string {
	owner := fx.SessionID
	id2, err := runner.Start(ctx, owner, s.request(fx, "echo second; exit 7"))
	if err != nil || !jobID.MatchString(id2) || id2 == id1 {
		t.Fatalf("Start(second job) = %q, %v; want a new bash-<16 hex>, nil", id2, err)
	}
	done, err := runner.Wait(wctx, owner, id2)
	if err != nil || !done.Done || done.Result == nil || done.Stdout != "second\n" {
		t.Fatalf("Wait(bash-2) = {Stdout: %q, Done: %v, Result: %s, Err: %v}, %v; want second, done", done.Stdout, done.Done, describe(done.Result), done.Err, err)
	}
	if got := sandbox.ExitCode(done.Result, nil); got != 7 {
		t.Errorf("bash-2 ended %s, want exit code 7", describe(done.Result))
	}
	return id2
}

// testJobsOwnerIsolation: one owner can neither read nor kill another's
// jobs.
func testJobsOwnerIsolation(t *testing.T, s *suite) {
	a, b := newFixture(t), newFixture(t)
	runner := jobs.New(s.exec)
	ctx := t.Context()
	t.Cleanup(func() {
		kctx, cancel := context.WithTimeout(context.Background(), jobDeadline)
		defer cancel()
		if err := runner.KillAll(kctx); err != nil {
			t.Errorf("KillAll: %v", err)
		}
	})
	wctx, cancel := context.WithTimeout(ctx, jobDeadline)
	defer cancel()

	a1, err := runner.Start(ctx, a.SessionID, s.request(a, `echo "A $DSH_SESSION_ID"`))
	if err != nil || !jobID.MatchString(a1) {
		t.Fatalf("Start(A's first job) = %q, %v; want bash-<16 hex>", a1, err)
	}
	marker := newMarker()
	a2, err := runner.Start(ctx, a.SessionID, s.request(a, "sleep "+marker))
	if err != nil || !jobID.MatchString(a2) {
		t.Fatalf("Start(A's second job) = %q, %v; want bash-<16 hex>", a2, err)
	}
	b1, err := runner.Start(ctx, b.SessionID, s.request(b, `echo "B $DSH_SESSION_ID"`))
	if err != nil || !jobID.MatchString(b1) {
		t.Fatalf("Start(B's first job) = %q, %v; want bash-<16 hex>", b1, err)
	}
	first := map[string]string{a.SessionID: a1, b.SessionID: b1}
	for owner, want := range map[string]string{a.SessionID: "A " + a.SessionID + "\n", b.SessionID: "B " + b.SessionID + "\n"} {
		out, err := runner.Wait(wctx, owner, first[owner])
		if err != nil || out.Stdout != want {
			t.Errorf("Wait(%s, %s) stdout = %q, %v; want %q", owner, first[owner], out.Stdout, err, want)
		}
	}
	if _, err := runner.Output(b.SessionID, a2); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Output(B, A's %s) error = %v, want ErrNotFound", a2, err)
	}
	if err := runner.Kill(wctx, b.SessionID, a2); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Kill(B, A's %s) error = %v, want ErrNotFound", a2, err)
	}
	if out, err := runner.Output(a.SessionID, a2); err != nil || out.Done {
		t.Errorf("A's %s after B tried to kill it: Done %v, %v; want still running", a2, out.Done, err)
	}
	if got := runner.List(b.SessionID); len(got) != 1 || got[0].ID != b1 {
		t.Errorf("List(B) = %+v, want only B's %s", got, b1)
	}
	if err := runner.Kill(wctx, a.SessionID, a2); err != nil {
		t.Errorf("Kill(A, %s) = %v", a2, err)
	}
	checkNoSurvivors(t, marker)
}
