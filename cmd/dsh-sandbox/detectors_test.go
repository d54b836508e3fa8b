package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestExecDetector: the command hands its pattern detector (gitleaks's
// rules) to the executors it opens: a made-up GitHub token that a call
// prints is replaced by the rule's marker under a policy with
// redact.detectors, and passes through without it.
func TestExecDetector(t *testing.T) {
	const token = "ghp_4vQ7xLm2Rt9ZkP0aBc3DeF6gHj8KnW1sYu5E"
	tmp, work, ops := t.TempDir(), t.TempDir(), t.TempDir()
	global := []string{"--home", filepath.Join(tmp, "home"), "--state-dir", filepath.Join(tmp, "state"), "--data-dir", filepath.Join(tmp, "data")}
	for _, tc := range []struct{ detectors, want string }{
		{"true", "token: [REDACTED:github-pat]\n"},
		{"false", "token: " + token + "\n"},
	} {
		f := filepath.Join(ops, "detect-"+tc.detectors+".yaml")
		if err := os.WriteFile(f, []byte("backend: local\nredact: {detectors: "+tc.detectors+"}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		args := append(append([]string{"exec"}, global...), "--json", "--policy", f, "--cwd", work, "--", "echo token: "+token)
		out, errOut, code := run(t, args...)
		var res sandbox.Result
		if code != 0 || json.Unmarshal([]byte(out), &res) != nil {
			t.Fatalf("exec (detectors %s) = %d, %q (%s); want 0 and a result", tc.detectors, code, out, errOut)
		}
		if res.Stdout.Text != tc.want {
			t.Errorf("exec (detectors %s): stdout %q, want %q", tc.detectors, res.Stdout.Text, tc.want)
		}
	}
}
