package sandboxtest

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/jobs"
)

// redactCases check that secrets never reach a call's output (issue 15):
// the kept tail, the spill files, the live writers and job output.
func redactCases() []testCase {
	return []testCase{
		{name: "redact-output", run: testRedactOutput},
		{name: "redact-job-output", run: testRedactJobOutput},
	}
}

// Secrets the redaction cases plant. The first is in the service's
// environment under a secret-looking name, which the secret filter keeps
// from the child: the call gets it as ordinary env, as a leaked value
// would arrive. The second has a plain name that the policy lists in
// redact.env; the third is the content of a redact.files file.
const (
	redactFiltered = "sbx-redact-filtered-0123456789"
	redactListed   = "sbx-redact-listed-abcdefghij"
	redactFile     = "sbx-redact-file-ABCDEFGHIJ"
)

// redactRequest is a call with a 200-byte tail whose policy redacts the
// planted secrets (and their base64 forms), with the filtered secret
// also in S and in two halves in S1 and S2.
func (s *suite) redactRequest(t *testing.T, fx *fixture, command string) *sandbox.Request {
	t.Helper()
	t.Setenv("SANDBOXTEST_REDACT_TOKEN", redactFiltered)
	t.Setenv("SANDBOXTEST_REDACT_PLAIN", redactListed)
	file := filepath.Join(t.TempDir(), "deploy-key")
	if err := os.WriteFile(file, []byte("\n"+redactFile+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	req := s.truncatingRequest(fx, command)
	req.StdoutMaxBytes = 200
	req.Policy.RedactEnv = []string{"SANDBOXTEST_REDACT_PLAIN"}
	req.Policy.RedactFiles = []string{file}
	req.Policy.RedactDetectors = true
	req.Env = []string{
		"S=" + redactFiltered, "S1=" + redactFiltered[:5], "S2=" + redactFiltered[5:],
		"L=" + redactListed, "F=" + redactFile,
	}
	return req
}

// checkRedacted fails unless no planted secret (nor its base64 form) is
// in text and every marker in want is.
func checkRedacted(t *testing.T, what, text string, want ...string) {
	t.Helper()
	for _, v := range []string{redactFiltered, redactListed, redactFile, base64.StdEncoding.EncodeToString([]byte(redactFiltered))} {
		if strings.Contains(text, v) {
			t.Errorf("%s shows the secret %q: %q", what, v, short(text))
		}
	}
	for _, m := range want {
		if !strings.Contains(text, m) {
			t.Errorf("%s = %q, want it to contain %q", what, short(text), m)
		}
	}
}

// testRedactOutput: a secret printed on stdout, on stderr, split across
// two writes, base64-encoded and in a spill-sized output is replaced by
// its marker in the tails, the spill files and the live writers.
func testRedactOutput(t *testing.T, s *suite) {
	fx := newFixture(t)
	const (
		filtered = "[REDACTED:SANDBOXTEST_REDACT_TOKEN]"
		listed   = "[REDACTED:SANDBOXTEST_REDACT_PLAIN]"
		fromFile = "[REDACTED:deploy-key]"
	)
	req := s.redactRequest(t, fx, `printf '%s\n' "$L" "$F"; printf '%s\n' "$S" >&2; `+
		`i=0; while [ $i -lt 40 ]; do printf 'line %s %s\n' $i "$S"; i=$((i+1)); done; `+
		`printf %s "$S1"; sleep 0.1; printf '%s\n' "$S2"; printf %s "$S" | base64`)
	var out, errOut lockedBuffer
	req.Stdout, req.Stderr = &out, &errOut
	res := s.runOK(t, req)

	checkRedacted(t, "stdout tail", res.Stdout.Text, "line 39 "+filtered+"\n"+filtered+"\n"+filtered+"\n")
	checkRedacted(t, "stderr tail", res.Stderr.Text, filtered)
	checkRedacted(t, "live stdout", out.String(), listed, fromFile, "line 39 "+filtered)
	checkRedacted(t, "live stderr", errOut.String(), filtered)
	if !res.Stdout.Truncated || res.Stdout.SpillPath == "" {
		t.Fatalf("stdout = %+v, want it truncated and spilled", res.Stdout)
	}
	spill, err := os.ReadFile(res.Stdout.SpillPath)
	if err != nil {
		t.Fatal(err)
	}
	checkRedacted(t, "stdout spill file", string(spill), listed, fromFile, "line 0 "+filtered)
	if string(spill) != out.String() {
		t.Errorf("spill file %q differs from the live stdout %q", short(string(spill)), short(out.String()))
	}
	if got := int64(len(res.Stdout.Text)) + res.Stdout.DroppedBytes; got != int64(len(out.String())) {
		t.Errorf("stdout counts %d bytes, want %d, the redacted stream's", got, len(out.String()))
	}
}

// testRedactJobOutput: a background job's output deltas and its final
// result are redacted, also when a secret is split across two reads.
func testRedactJobOutput(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.redactRequest(t, fx, `printf %s "$S1"; sleep 0.3; printf '%s\n' "$S2"; printf '%s\n' "$L" >&2`)
	runner := jobs.New(s.exec)
	id, err := runner.Start(t.Context(), "sandboxtest", req)
	if err != nil {
		t.Fatalf("Start = %v", err)
	}
	var stdout, stderr strings.Builder
	for reads := 1; ; reads++ {
		o, err := runner.Output("sandboxtest", id)
		if err != nil {
			t.Fatalf("Output = %v", err)
		}
		if strings.Contains(o.Stdout, redactFiltered[:5]) {
			t.Errorf("read %d shows the secret's first half %q before its end was known", reads, o.Stdout)
		}
		stdout.WriteString(o.Stdout)
		stderr.WriteString(o.Stderr)
		if o.Done {
			if o.Result == nil {
				t.Fatalf("job ended with %v, want a result", o.Err)
			}
			checkRedacted(t, "job result stdout", o.Result.Stdout.Text, "[REDACTED:SANDBOXTEST_REDACT_TOKEN]")
			break
		}
		select {
		case <-t.Context().Done():
			t.Fatal("the job did not end")
		case <-time.After(50 * time.Millisecond):
		}
	}
	checkRedacted(t, "job stdout deltas", stdout.String(), "[REDACTED:SANDBOXTEST_REDACT_TOKEN]\n")
	checkRedacted(t, "job stderr deltas", stderr.String(), "[REDACTED:SANDBOXTEST_REDACT_PLAIN]\n")
}
