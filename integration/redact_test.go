//go:build integration

package integration

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
)

// TestServeRedactsSecrets: a secret named by a policy's redact.files and
// printed by calls of the service (stdout, stderr, split across writes,
// base64, beyond the tail) is in none of the result, the rendered text,
// the spill file, a job's output and the audit log.
func TestServeRedactsSecrets(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	const secret = "integration-redact-0123456789"
	dir := t.TempDir()
	file := filepath.Join(dir, "api-key")
	if err := os.WriteFile(file, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "redacting.yaml")
	doc := "name: redacting\nbackend: oci\nruntime: runc\nimage: host\nworkspace: rw\n" +
		"redact: {files: [" + file + "], detectors: true}\n"
	if err := os.WriteFile(pol, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	sv := startServe(t, e, "--policy-file", pol)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := []string{"S=" + secret, "S1=" + secret[:5], "S2=" + secret[5:]}
	leaks := func(what, text string) {
		t.Helper()
		for _, v := range []string{secret, base64.StdEncoding.EncodeToString([]byte(secret))} {
			if strings.Contains(text, v) {
				t.Errorf("%s shows the secret: %q", what, text)
			}
		}
	}

	cmd := `printf '%s\n' "$S" >&2; i=0; while [ $i -lt 50 ]; do printf '%s\n' "$S"; i=$((i+1)); done; ` +
		`printf %s "$S1"; sleep 0.1; printf '%s\n' "$S2"; printf %s "$S" | base64`
	resp, err := sv.cl.Run(ctx, types.RunRequest{Session: e.header("s1"), Policy: "redacting", Command: cmd, Env: env, StdoutMaxBytes: 100})
	if err != nil {
		t.Fatal(err)
	}
	res := resp.Result
	leaks("stdout", res.Stdout.Text)
	leaks("stderr", res.Stderr.Text)
	leaks("rendered", resp.Rendered)
	if want := "[REDACTED:api-key]\n[REDACTED:api-key]\n"; !strings.HasSuffix(res.Stdout.Text, want) || res.Stderr.Text != "[REDACTED:api-key]\n" {
		t.Errorf("stdout %q, stderr %q: want the split and base64 secrets redacted at the end of stdout, and stderr redacted", res.Stdout.Text, res.Stderr.Text)
	}
	if res.Stdout.SpillPath == "" {
		t.Fatalf("stdout = %+v, want a spill file", res.Stdout)
	}
	spill, err := os.ReadFile(res.Stdout.SpillPath)
	if err != nil {
		t.Fatal(err)
	}
	leaks("spill file", string(spill))
	if n := strings.Count(string(spill), "[REDACTED:api-key]\n"); n != 52 {
		t.Errorf("spill file holds %d markers, want 52", n)
	}

	id, err := sv.cl.StartJob(ctx, types.RunRequest{Session: e.header("s1"), Policy: "redacting", Command: `printf %s "$S1"; sleep 0.5; printf '%s\n' "$S2"`, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	var jobOut strings.Builder
	for {
		o, err := sv.cl.JobOutput(ctx, "s1", id)
		if err != nil {
			t.Fatal(err)
		}
		leaks("job output delta", o.Stdout)
		if strings.Contains(o.Stdout, secret[:5]) {
			t.Errorf("a job output delta shows the secret's first half: %q", o.Stdout)
		}
		jobOut.WriteString(o.Stdout)
		if o.Done {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if jobOut.String() != "[REDACTED:api-key]\n" {
		t.Errorf("job output = %q, want the marker", jobOut.String())
	}

	sv.stop(t)
	audit, err := os.ReadFile(sv.audit)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := auditRecords(t, sv.audit); n != 2 {
		t.Errorf("audit log holds %d records, want 2", n)
	}
	leaks("audit log", string(audit))
	leaks("service log", sv.logs())
}
