//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
)

// TestCallsAndJobsCLI drives a real serve with the docker-like commands,
// once through the local default socket (no --server) and once with
// --server: exec --detach prints a job id; calls lists it; jobs lists
// it; jobs output streams it and exits with its code once it ended; jobs
// kill and calls kill stop running ones, which then leave calls.
func TestCallsAndJobsCLI(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	sv := startServe(t, e)
	for _, server := range [][]string{nil, {"--server", "unix://" + sv.sock}} {
		cli := func(sessionID string, args ...string) result {
			t.Helper()
			return run(t, nil, append(append(args, e.flags(sessionID)...), server...)...)
		}
		release := filepath.Join(e.workspace, "release")
		os.Remove(release)
		detach := func(command string) string {
			t.Helper()
			r := run(t, nil, append(append(append([]string{"exec", "--detach"}, e.flags("s1")...), server...), "--", command)...)
			id := strings.TrimSpace(r.stdout)
			if r.code != 0 || !strings.HasPrefix(id, "bash-") {
				t.Fatalf("exec --detach %v = %d, %q, %q; want a job id", server, r.code, r.stdout, r.stderr)
			}
			return id
		}
		waiting := detach("echo started; while [ ! -e release ]; do sleep 0.1; done; echo finished; exit 3")
		byJob := detach("sleep 600")
		byCall := detach("sleep 600")

		r := cli("", "calls", "--json")
		var calls types.CallsResponse
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &calls) != nil {
			t.Fatalf("calls --json %v = %d, %q, %q", server, r.code, r.stdout, r.stderr)
		}
		callOf := map[string]string{}
		for _, ci := range calls.Calls {
			if ci.Kind == "job" && ci.SessionID == "s1" {
				callOf[ci.JobID] = ci.ID
			}
		}
		for _, id := range []string{waiting, byJob, byCall} {
			if callOf[id] == "" {
				t.Errorf("calls --json %v = %s, want job %s listed", server, r.stdout, id)
			}
		}
		if r := cli("", "calls"); r.code != 0 || !strings.Contains(r.stdout, callOf[waiting]) || !strings.Contains(r.stdout, "STATE") {
			t.Errorf("calls %v = %d, %q; want a table with %s", server, r.code, r.stdout, callOf[waiting])
		}
		if r := cli("s1", "jobs"); r.code != 0 || !strings.Contains(r.stdout, waiting) {
			t.Errorf("jobs %v = %d, %q, %q; want %s listed", server, r.code, r.stdout, r.stderr, waiting)
		}

		if r := cli("s1", "jobs", "kill", byJob); r.code != 0 {
			t.Errorf("jobs kill %s %v = %d, %q", byJob, server, r.code, r.stderr)
		}
		if r := cli("", "calls", "kill", callOf[byCall]); r.code != 0 || !strings.Contains(r.stdout, "killed") {
			t.Errorf("calls kill %s %v = %d, %q, %q", callOf[byCall], server, r.code, r.stdout, r.stderr)
		}
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		deadline := time.Now().Add(60 * time.Second)
		for {
			r := cli("s1", "jobs", "output", waiting)
			out.WriteString(r.stdout)
			if r.code == 3 {
				break
			}
			if r.code != 0 || time.Now().After(deadline) {
				t.Fatalf("jobs output %s %v = %d, %q; want 0 while it runs, then 3", waiting, server, r.code, r.stderr)
			}
			time.Sleep(200 * time.Millisecond)
		}
		if out.String() != "started\nfinished\n" {
			t.Errorf("jobs output %s %v gave %q in all, want started and finished", waiting, server, out.String())
		}
		r = cli("", "calls", "--json")
		if err := json.Unmarshal([]byte(r.stdout), &calls); err != nil {
			t.Fatal(err)
		}
		for _, ci := range calls.Calls {
			t.Errorf("calls %v after the jobs ended or were killed still lists %+v", server, ci)
		}
		if r := cli("", "calls", "kill", "nosuch"); r.code == 0 {
			t.Errorf("calls kill nosuch %v exited 0, want a refusal", server)
		}
	}
}
