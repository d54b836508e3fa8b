package api_test

import (
	"context"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestServerCallsListAndCancelScoped(t *testing.T) {
	exec := &fakeExec{block: make(chan struct{}), started: make(chan struct{}, 4)}
	f := newFixture(t, exec, nil)
	defer close(exec.block)
	_, cls := serveTokens(t, f, []api.TokenClient{{Name: "a", Token: "tok-a"}, {Name: "b", Token: "tok-b"}})
	a, b := cls["a"], cls["b"]
	ctx := context.Background()
	jobID, err := a.StartJob(ctx, types.RunRequest{Session: header("s1", f.work), Policy: policy.WorkspaceWrite, Command: "sleep"})
	if err != nil {
		t.Fatal(err)
	}
	<-exec.started
	type runOut struct {
		resp *types.RunResponse
		err  error
	}
	ran := make(chan runOut, 1)
	go func() {
		resp, err := a.Run(ctx, types.RunRequest{Session: header("s1", f.work), Policy: policy.WorkspaceWrite, Command: "sleep"})
		ran <- runOut{resp, err}
	}()
	<-exec.started

	calls, err := a.Calls(ctx)
	if err != nil || len(calls) != 2 {
		t.Fatalf("a: Calls = %+v, %v; want a job and a run", calls, err)
	}
	var runID, jobExec string
	for _, c := range calls {
		if c.State != types.CallRunning || c.SessionID != "s1" || c.Policy != policy.WorkspaceWrite || c.ID == "" {
			t.Errorf("a: call %+v, want running in s1 under %s", c, policy.WorkspaceWrite)
		}
		switch c.Kind {
		case types.CallKindRun:
			runID = c.ID
		case types.CallKindJob:
			jobExec = c.ID
			if c.JobID != jobID {
				t.Errorf("a: job call names job %q, want %q", c.JobID, jobID)
			}
		}
	}
	if runID == "" || jobExec == "" {
		t.Fatalf("a: Calls = %+v; want one run and one job", calls)
	}

	// Another client sees none of them and cannot cancel them.
	if bc, err := b.Calls(ctx); err != nil || len(bc) != 0 {
		t.Errorf("b: Calls = %+v, %v; want none", bc, err)
	}
	for _, id := range []string{runID, jobExec, "no-such-call"} {
		if err := b.CancelCall(ctx, id); api.HTTPStatus(err) != 404 {
			t.Errorf("b: CancelCall(%s) = %v, want 404", id, err)
		}
	}
	if ac, err := a.Calls(ctx); err != nil || len(ac) != 2 {
		t.Errorf("a: Calls after b's attempts = %+v, %v; want both still running", ac, err)
	}

	// The owner cancels both: the run answers aborted, the job ends.
	if err := a.CancelCall(ctx, runID); err != nil {
		t.Fatalf("a: CancelCall(run) = %v", err)
	}
	out := <-ran
	if out.err != nil || out.resp.Result == nil || !out.resp.Result.Aborted || out.resp.ExecutionID != runID {
		t.Errorf("the cancelled run answered %+v, %v; want aborted, execution %s", out.resp, out.err, runID)
	}
	if err := a.CancelCall(ctx, jobExec); err != nil {
		t.Fatalf("a: CancelCall(job) = %v", err)
	}
	// The execution has ended; the job's own record follows at once.
	for {
		o, err := a.JobOutput(ctx, "s1", jobID)
		if err != nil {
			t.Fatalf("the cancelled job: %v", err)
		}
		if o.Done {
			if o.Result != nil && !o.Result.Aborted {
				t.Errorf("the cancelled job's result %+v, want aborted", o.Result)
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if ac, err := a.Calls(ctx); err != nil || len(ac) != 0 {
		t.Errorf("a: Calls after cancelling = %+v, %v; want none", ac, err)
	}
}

func TestServerSetPoliciesReloads(t *testing.T) {
	f := newFixture(t, &fakeExec{}, nil)
	ctx := context.Background()
	run := func(name string) error {
		_, err := f.cl.Run(ctx, types.RunRequest{Cwd: f.work, Policy: name, Command: "true"})
		return err
	}
	if err := run(policy.ReadOnly); api.HTTPStatus(err) != 400 {
		t.Fatalf("before reload, %s: %v, want 400 (unknown)", policy.ReadOnly, err)
	}
	p, _ := policy.Builtin(policy.ReadOnly)
	p, err := policy.Normalize(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.srv.SetPolicies(map[string]sandbox.Policy{p.Name: p}); err != nil {
		t.Fatal(err)
	}
	if err := run(policy.ReadOnly); err != nil {
		t.Errorf("after reload, %s: %v", policy.ReadOnly, err)
	}
	if err := run(policy.WorkspaceWrite); api.HTTPStatus(err) != 400 {
		t.Errorf("after reload, the dropped %s: %v, want 400", policy.WorkspaceWrite, err)
	}
	if err := f.srv.SetPolicies(nil); err == nil {
		t.Errorf("SetPolicies(nil) succeeded; want refused")
	}
}
