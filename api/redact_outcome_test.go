package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

const egressSecret = "egress-secret-0123456789"

// egressExec answers a call with a denied CONNECT to a host holding
// egressSecret and, for command "fail", an error naming it.
type egressExec struct{}

func (egressExec) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	if req.Command == "fail" {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "proxy could not reach %s.example", egressSecret)
	}
	zero := 0
	return &sandbox.Result{ExitCode: &zero, Egress: []sandbox.Connection{{
		Host: egressSecret + ".example", Port: 443, Verdict: "denied", Reason: "host " + egressSecret + ".example is not in the allowlist",
	}}}, nil
}

// TestServerRedactsOutcome: a secret of the service's environment in an
// egress host or reason or in an error reaches no client, by any front
// end (JSON, NDJSON, background job), and the audit log: each shows
// [REDACTED:NAME], and the error keeps its class.
func TestServerRedactsOutcome(t *testing.T) {
	t.Setenv("EGRESSTEST_API_TOKEN", egressSecret)
	f := newFixture(t, &fakeExec{}, func(o *api.Options) { o.Executor = egressExec{} })
	ctx := context.Background()
	const marker = "[REDACTED:EGRESSTEST_API_TOKEN]"
	show := func(what string, v any) {
		t.Helper()
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), egressSecret) || !strings.Contains(string(data), marker) {
			t.Errorf("%s = %s, want %s and not the secret", what, data, marker)
		}
	}
	run := types.RunRequest{Policy: policy.WorkspaceWrite, Command: "curl", Cwd: f.work}
	resp, err := f.cl.Run(ctx, run)
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	show("Run's result", resp.Result)
	if resp.Result.Egress[0].Host != marker+".example" {
		t.Errorf("Run's egress host = %q, want %s.example", resp.Result.Egress[0].Host, marker)
	}
	var out, errOut bytes.Buffer
	resp, err = f.cl.Stream(ctx, run, &out, &errOut)
	if err != nil {
		t.Fatalf("Stream = %v", err)
	}
	show("Stream's result", resp.Result)

	fail := run
	fail.Command = "fail"
	_, err = f.cl.Run(ctx, fail)
	if !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("Run(fail) = %v, want ErrUnavailable", err)
	}
	show("Run(fail)'s error", err.Error())
	_, err = f.cl.Stream(ctx, fail, &out, &errOut)
	show("Stream(fail)'s error", err.Error())

	job := run
	job.Session, job.Cwd = header("s1", f.work), ""
	for _, cmd := range []string{"curl", "fail"} {
		job.Command = cmd
		id, err := f.cl.StartJob(ctx, job)
		if err != nil {
			t.Fatalf("StartJob(%s) = %v", cmd, err)
		}
		var jo sandbox.JobOutput
		for deadline := time.Now().Add(30 * time.Second); !jo.Done && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if jo, err = f.cl.JobOutput(ctx, "s1", id); err != nil {
				t.Fatalf("JobOutput = %v", err)
			}
		}
		if !jo.Done {
			t.Fatalf("job %s did not end", cmd)
		}
		if cmd == "fail" {
			show("the failed job's error", jo.Err.Error())
		} else {
			show("the job's result", jo.Result)
		}
	}

	log, err := os.ReadFile(f.audit)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(log), egressSecret) || strings.Count(string(log), marker) < 6 {
		t.Errorf("audit log = %s, want markers and not the secret", log)
	}
}

// tokExec fails every call with an error naming a token of calls.Detector's
// shape.
type tokExec struct{}

func (tokExec) Run(context.Context, *sandbox.Request) (*sandbox.Result, error) {
	return nil, sandbox.Errorf(sandbox.ErrUnavailable, "failed near tok_0123456789 here")
}

// TestServerDetectorRedactsOutcome: Options.Detector also redacts the
// outcome of a call whose policy sets redact.detectors, and of no other.
func TestServerDetectorRedactsOutcome(t *testing.T) {
	p, _ := policy.Builtin(policy.WorkspaceWrite)
	p.Name, p.RedactDetectors = "detecting", true
	p, err := policy.Normalize(p)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, &fakeExec{}, func(o *api.Options) {
		o.Executor, o.Detector = tokExec{}, calls.Detector{}
		o.Policies[p.Name] = p
	})
	for _, tc := range []struct{ policy, want string }{
		{"detecting", "failed near [REDACTED:tok] here"},
		{policy.WorkspaceWrite, "failed near tok_0123456789 here"},
	} {
		_, err := f.cl.Run(context.Background(), types.RunRequest{Policy: tc.policy, Command: "true", Cwd: f.work})
		if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run under %s = %v, want ErrUnavailable saying %q", tc.policy, err, tc.want)
		}
	}
}

// TestServerWithoutDetectorRefusesDetectors: a service without
// Options.Detector refuses a call or a job whose policy sets
// redact.detectors before it runs (class unavailable, 503, naming
// redact.detectors), and runs the same call under a policy without it.
func TestServerWithoutDetectorRefusesDetectors(t *testing.T) {
	p, _ := policy.Builtin(policy.WorkspaceWrite)
	p.Name, p.RedactDetectors = "detecting", true
	p, err := policy.Normalize(p)
	if err != nil {
		t.Fatal(err)
	}
	exec := &fakeExec{}
	f := newFixture(t, exec, func(o *api.Options) { o.Policies[p.Name] = p })
	rr := types.RunRequest{Policy: p.Name, Command: "true", Cwd: f.work}
	_, runErr := f.cl.Run(context.Background(), rr)
	_, jobErr := f.cl.StartJob(context.Background(), rr)
	for what, err := range map[string]error{"Run": runErr, "StartJob": jobErr} {
		if !errors.Is(err, sandbox.ErrUnavailable) || api.HTTPStatus(err) != 503 || !strings.Contains(err.Error(), "redact.detectors") {
			t.Errorf("%s under redact.detectors without a detector = %v, want class unavailable naming redact.detectors", what, err)
		}
	}
	if n := exec.calls.Load(); n != 0 {
		t.Errorf("the executor ran %d calls, want none", n)
	}
	rr.Policy = policy.WorkspaceWrite
	if _, err := f.cl.Run(context.Background(), rr); err != nil || exec.calls.Load() != 1 {
		t.Errorf("Run under %s = %v after %d calls, want it run", policy.WorkspaceWrite, err, exec.calls.Load())
	}
}
