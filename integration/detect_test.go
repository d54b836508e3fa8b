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
)

// TestServeRedactDetectors: a GitHub token and an AWS access key (made
// up, of the shapes gitleaks's rules know) printed by a call are
// replaced by the rule's marker in stdout, stderr and the audit log
// under a policy with redact.detectors, and pass through without it.
func TestServeRedactDetectors(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	const (
		github = "ghp_4vQ7xLm2Rt9ZkP0aBc3DeF6gHj8KnW1sYu5E"
		aws    = "AKIAZ7QW4RT2YU6IO3PL"
	)
	dir := t.TempDir()
	var files []string
	for name, detectors := range map[string]string{"detecting": "true", "plain": "false"} {
		f := filepath.Join(dir, name+".yaml")
		doc := "name: " + name + "\nbackend: oci\nruntime: runc\nimage: host\nredact: {detectors: " + detectors + "}\n"
		if err := os.WriteFile(f, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, "--policy-file", f)
	}
	sv := startServe(t, e, files...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The token is printed in two writes, the key on stderr.
	cmd := `printf 'token: ghp_4vQ7xLm2Rt9Zk'; sleep 0.1; printf 'P0aBc3DeF6gHj8KnW1sYu5E\n'; echo "aws_access_key_id=` + aws + `" >&2`
	run := func(policy string) types.RunResponse {
		resp, err := sv.cl.Run(ctx, types.RunRequest{Session: e.header("s-" + policy), Policy: policy, Command: cmd})
		if err != nil {
			t.Fatal(err)
		}
		return *resp
	}
	on := run("detecting")
	if got, want := on.Result.Stdout.Text, "token: [REDACTED:github-pat]\n"; got != want {
		t.Errorf("detectors on: stdout %q, want %q", got, want)
	}
	if got, want := on.Result.Stderr.Text, "aws_access_key_id=[REDACTED:aws-access-token]\n"; got != want {
		t.Errorf("detectors on: stderr %q, want %q", got, want)
	}
	off := run("plain")
	if got, want := off.Result.Stdout.Text, "token: "+github+"\n"; got != want {
		t.Errorf("detectors off: stdout %q, want %q", got, want)
	}
	if !strings.Contains(off.Result.Stderr.Text, aws) {
		t.Errorf("detectors off: stderr %q, want the key as printed", off.Result.Stderr.Text)
	}
	sv.stop(t)
	audit, err := os.ReadFile(sv.audit)
	if err != nil {
		t.Fatal(err)
	}
	// The audit record of the call under "detecting" holds its command,
	// which names the key: redacted too.
	for _, l := range strings.Split(string(audit), "\n") {
		if strings.Contains(l, `"detecting"`) && (strings.Contains(l, aws) || strings.Contains(l, github)) {
			t.Errorf("the audit record of the detecting call shows a secret: %s", l)
		}
	}
}
