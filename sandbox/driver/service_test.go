package driver_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// TestServiceWithDefaultsCase: each zero field gets its documented
// default, a set field is kept, and the logger carries the backend's
// fields.
func TestServiceWithDefaultsCase(t *testing.T) {
	t.Setenv("DSH_TEST_SERVICE_DEFAULTS", "from-os")
	own := func(string) (string, bool) { return "own", true }
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	for _, tc := range []struct {
		name      string
		in        driver.Service
		wantGrace time.Duration
		wantEnv   string
		wantLog   bool // the logger writes to buf
	}{
		{"zero", driver.Service{StateDir: "/s"}, sandbox.DefaultKillGrace, "from-os", false},
		{"negative grace", driver.Service{StateDir: "/s", KillGrace: -time.Second}, sandbox.DefaultKillGrace, "from-os", false},
		{"set", driver.Service{StateDir: "/s", KillGrace: 5 * time.Second, Getenv: own, Logger: log}, 5 * time.Second, "own", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			buf.Reset()
			got := tc.in.WithDefaults("backend", "toy", "instance", "i1")
			if got.StateDir != "/s" || got.KillGrace != tc.wantGrace {
				t.Errorf("WithDefaults(%+v) = StateDir %q, KillGrace %v; want /s, %v", tc.in, got.StateDir, got.KillGrace, tc.wantGrace)
			}
			if v, _ := got.Getenv("DSH_TEST_SERVICE_DEFAULTS"); v != tc.wantEnv {
				t.Errorf("WithDefaults(%+v).Getenv = %q, want %q", tc.in, v, tc.wantEnv)
			}
			if got.Logger == nil {
				t.Fatalf("WithDefaults(%+v).Logger is nil", tc.in)
			}
			got.Logger.Info("hello")
			if wrote := strings.Contains(buf.String(), "backend=toy instance=i1"); wrote != tc.wantLog {
				t.Errorf("WithDefaults(%+v): the logger wrote %q; want the backend's fields: %v", tc.in, buf.String(), tc.wantLog)
			}
		})
	}
}
