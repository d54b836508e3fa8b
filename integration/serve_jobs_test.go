//go:build integration

package integration

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// jobEnd polls job id until it has ended (within limit) and returns what
// the service reports.
func jobEnd(t *testing.T, sv *service, session, id string, limit time.Duration) sandbox.JobOutput {
	t.Helper()
	var stdout string
	for deadline := time.Now().Add(limit); ; time.Sleep(time.Second) {
		o, err := sv.cl.JobOutput(context.Background(), session, id)
		if err != nil {
			t.Fatalf("JobOutput(%s) = %v", id, err)
		}
		stdout += o.Stdout
		if o.Done {
			o.Stdout = stdout
			return o
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still running after %v (stdout %q)", id, limit, stdout)
		}
	}
}

// TestServeJobHasNoDeadline: under the default policy (a 120 s
// foreground timeout) a background `sleep 200` runs to its end and exits
// 0, as dsh's own jobs do (DESIGN §3.7). It takes 200 s, so it runs in
// parallel with the other tests.
func TestServeJobHasNoDeadline(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	e := newEnv(t)
	sv := startServe(t, e)
	start := time.Now()
	id, err := sv.cl.StartJob(context.Background(), types.RunRequest{Session: e.header("jobs"), Policy: "workspace-write", Command: "sleep 200; echo done"})
	if err != nil {
		t.Fatal(err)
	}
	o := jobEnd(t, sv, "jobs", id, 400*time.Second)
	r := o.Result
	if o.Err != nil || r == nil || r.ExitCode == nil || *r.ExitCode != 0 || r.TimedOut || r.Aborted || o.Stdout != "done\n" {
		t.Fatalf("sleep 200 job ended %+v (result %+v), want exit 0 with its output", o, r)
	}
	if took := time.Since(start); took < 200*time.Second {
		t.Errorf("the job ended after %v, before its sleep 200 could", took)
	}
	if r.TimeoutMs != 0 {
		t.Errorf("the job's result says timeoutMs %d, want 0 (no deadline)", r.TimeoutMs)
	}
}

// TestServeJobDeadlineIsTimedOut: a policy with limits.jobTimeoutMs
// stops a longer job at that deadline, and the service reports it timed
// out (not exited); a job within the deadline exits normally.
func TestServeJobDeadlineIsTimedOut(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	e := newEnv(t)
	pol := filepath.Join(t.TempDir(), "jobdeadline.yaml")
	doc := "name: jobdeadline\nbackend: oci\nruntime: runc\nimage: host\nworkspace: rw\nlimits:\n  jobTimeoutMs: 3000\n"
	if err := os.WriteFile(pol, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	sv := startServe(t, e, "--policy-file", pol)
	long, err := sv.cl.StartJob(context.Background(), types.RunRequest{Session: e.header("jobs"), Policy: "jobdeadline", Command: "echo started; sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	short, err := sv.cl.StartJob(context.Background(), types.RunRequest{Session: e.header("jobs"), Policy: "jobdeadline", Command: "echo quick"})
	if err != nil {
		t.Fatal(err)
	}
	o := jobEnd(t, sv, "jobs", long, 60*time.Second)
	if r := o.Result; r == nil || !r.TimedOut || r.Aborted || r.ExitCode != nil || r.TimeoutMs != 3000 || !strings.Contains(o.Stdout, "started") {
		t.Errorf("job past its 3000 ms deadline ended %+v (result %+v), want timed out after 3000 ms", o, r)
	}
	if o := jobEnd(t, sv, "jobs", short, 60*time.Second); o.Result == nil || o.Result.TimedOut || o.Result.ExitCode == nil || *o.Result.ExitCode != 0 {
		t.Errorf("job within the deadline ended %+v, want exit 0", o)
	}
}
