package driver_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

// TestServiceWithoutDetector: a backend whose driver.Service has no
// detector refuses a call whose policy sets RedactDetectors, before it
// runs anything, with an unavailable error naming redact.detectors; it
// runs the same call without RedactDetectors.
func TestServiceWithoutDetector(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skipf("bash is not installed: %v", err)
	}
	ex := toyExecutor{&toy{stateDir: t.TempDir()}}
	mark := filepath.Join(t.TempDir(), "ran")
	p := toyPolicy()
	p.RedactDetectors = true
	req := &sandbox.Request{Command: "echo a tok_0123456789 b; touch " + mark, Policy: p, Session: sandbox.Session{Cwd: t.TempDir()}}
	res, err := ex.Run(context.Background(), req)
	if res != nil || !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "redact.detectors") {
		t.Errorf("Run with redact.detectors and no detector = %+v, %v; want an unavailable error naming redact.detectors", res, err)
	}
	if _, err := os.Stat(mark); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused call ran: %s: %v", mark, err)
	}
	req.Policy.RedactDetectors = false
	if res, err := ex.Run(context.Background(), req); err != nil || res.Stdout.Text != "a tok_0123456789 b\n" {
		t.Errorf("Run without redact.detectors = %+v, %v; want it run", res, err)
	}
}
