package render

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestDenials(t *testing.T) {
	egress := []sandbox.Connection{
		{Host: "api.example", Port: 443, Verdict: "allowed", Reason: "allow api.example"},
		{Host: "evil.test", Port: 443, Verdict: "denied", Reason: "not in the allowlist"},
		{Host: "::1", Port: 80, Verdict: "denied", Reason: "loopback"},
		{Host: "evil.test", Port: 443, Verdict: "denied", Reason: "not in the allowlist"},
		{Host: "down.example", Port: 443, Verdict: "failed", Reason: "allow down.example"},
	}
	want := []Denial{{"evil.test", 443, "not in the allowlist", 2}, {"::1", 80, "loopback", 1}}
	if got := Denials(egress); !reflect.DeepEqual(got, want) {
		t.Errorf("Denials() = %+v, want %+v", got, want)
	}
	if got, want := DenialNote(egress), "[network: the sandbox denied connections to evil.test:443, [::1]:80; a policy decision, not a network fault]"; got != want {
		t.Errorf("DenialNote() = %q, want %q", got, want)
	}
	if Denials(egress[:1]) != nil || DenialNote(egress[:1]) != "" {
		t.Errorf("a record without denials gave %+v, %q; want none", Denials(egress[:1]), DenialNote(egress[:1]))
	}
	var many []sandbox.Connection
	for i := range 8 {
		many = append(many, sandbox.Connection{Host: fmt.Sprintf("h%d.test", i), Port: 443, Verdict: "denied", Reason: "r"})
	}
	if note := DenialNote(many); !strings.Contains(note, "h4.test:443 and 3 more;") || strings.Contains(note, "h5.test") {
		t.Errorf("DenialNote(8 hosts) = %q, want five named and 3 counted", note)
	}
}

// TestRenderEndsWithDenialNote: a result with denials ends with the
// note, after the exit code; one without is rendered as dsh renders it.
func TestRenderEndsWithDenialNote(t *testing.T) {
	code := 7
	res := &sandbox.Result{ExitCode: &code, Stderr: sandbox.Stream{Text: "curl: (7) Failed to connect\n"},
		Egress: []sandbox.Connection{{Host: "evil.test", Port: 443, Verdict: "denied", Reason: "not in the allowlist"}}}
	want := "[stderr]\ncurl: (7) Failed to connect\n[exit code: 7]\n[network: the sandbox denied connections to evil.test:443; a policy decision, not a network fault]"
	if got := Result(res); got != want {
		t.Errorf("Result() = %q, want %q", got, want)
	}
	res.Egress[0].Verdict = "allowed"
	if got := Result(res); strings.Contains(got, "network") {
		t.Errorf("Result(no denial) = %q, want no note", got)
	}
}
