package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/secrets"
)

// TestAuditRecordRedacts: a secret of the service's environment that
// reaches an error message or an egress host name is not in the audit
// record built from the redacted outcome (secrets.RedactOutcome), and the error
// keeps its class.
func TestAuditRecordRedacts(t *testing.T) {
	const secret = "audit-secret-0123456789"
	t.Setenv("AUDITTEST_API_TOKEN", secret)
	req := &sandbox.Request{Command: "curl https://" + secret + ".example", Policy: sandbox.Policy{Name: "p", Backend: "oci"}}
	res := &sandbox.Result{Egress: []sandbox.Connection{{Host: secret + ".example", Port: 443, Verdict: "denied", Reason: "host " + secret + ".example is not allowed"}}}
	rres, rerr := secrets.RedactOutcome(req.Policy, nil, res, sandbox.Errorf(sandbox.ErrUnavailable, "runtime said %s", secret))
	if !errors.Is(rerr, sandbox.ErrUnavailable) {
		t.Errorf("RedactOutcome's error %v lost its class", rerr)
	}
	rec := auditRecord(req, "", false, 0, rres, rerr)
	line, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(line), secret) {
		t.Errorf("audit record shows the secret: %s", line)
	}
	if !strings.Contains(rec.Error, "[REDACTED:AUDITTEST_API_TOKEN]") || rec.Egress[0].Host != "[REDACTED:AUDITTEST_API_TOKEN].example" {
		t.Errorf("audit record = %s, want markers in the error and the egress host", line)
	}
	if res.Egress[0].Host != secret+".example" {
		t.Errorf("redactOutcome changed the result's egress host to %q", res.Egress[0].Host)
	}

	// A redact file that cannot be read leaves the free text out.
	req.Policy.RedactFiles = []string{"/nonexistent/secret"}
	rres, rerr = secrets.RedactOutcome(req.Policy, nil, res, errors.New("failed near "+secret))
	rec = auditRecord(req, "", false, 0, rres, rerr)
	if strings.Contains(rec.Error, secret) || rec.Egress != nil {
		t.Errorf("without the secrets, audit record error = %q, egress %v, want neither to show anything", rec.Error, rec.Egress)
	}
}
