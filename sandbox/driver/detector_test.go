package driver_test

import (
	"context"
	"os/exec"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestServiceDetector: the detector of the backend's driver.Service
// redacts the output of a call whose policy sets RedactDetectors, and of
// no other call.
func TestServiceDetector(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("bash is not installed: %v", err)
	}
	ex := toyExecutor{&toy{stateDir: t.TempDir(), detector: calls.Detector{}}}
	for _, tc := range []struct {
		detectors bool
		want      string
	}{{true, "a [REDACTED:tok] b\n"}, {false, "a tok_0123456789 b\n"}} {
		p := toyPolicy()
		p.RedactDetectors = tc.detectors
		res, err := ex.Run(context.Background(), &sandbox.Request{Command: "echo a tok_0123456789 b", Policy: p, Session: sandbox.Session{Cwd: t.TempDir()}})
		if err != nil {
			t.Fatal(err)
		}
		if res.Stdout.Text != tc.want {
			t.Errorf("RedactDetectors %v: stdout %q, want %q", tc.detectors, res.Stdout.Text, tc.want)
		}
	}
}
