package docker

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// runLifelineHelper is the helper process of
// TestLifelineKilledSupervisor (fixtures.KillSupervisor): it supervises
// one call, which the test kills it in the middle of.
func runLifelineHelper(s fixtures.Supervisor) int {
	e, err := New(context.Background(), Options{Service: driver.Service{StateDir: s.State, Logger: slog.New(slog.DiscardHandler)}, InstanceID: s.Instance})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p, _ := policy.Builtin(policy.WorkspaceWrite)
	p.Backend, p.Image = Backend, testImage
	return s.Run(func(command, cwd string, stdout io.Writer) error {
		_, err := e.Run(context.Background(), &sandbox.Request{Command: command, Policy: p, Session: sandbox.Session{ID: "s", Cwd: cwd}, Stdout: stdout})
		return err
	})
}

// TestLifelineKilledSupervisor: kill -9 of the process that supervises
// a running call ends the call within 2 s — the engine closes the stub's
// stdin (the attach stream's), the stub kills everything and exits —
// with no reap; a reap afterwards leaves nothing of the dead instance.
func TestLifelineKilledSupervisor(t *testing.T) {
	e := newTestExecutor(t) // imports the test image
	state := t.TempDir()
	dead := "lifeline-" + e.instance
	marker := fmt.Sprintf("%d%d", 8400000, os.Getpid())
	ws := t.TempDir()
	took, left := fixtures.KillSupervisor(t, fixtures.Supervisor{State: state, Instance: dead, Cwd: ws, Marker: marker}, 2*time.Second)
	if len(left) > 0 {
		t.Errorf("%v after kill -9 of the supervisor, the call still runs:\n  %s", took, strings.Join(left, "\n  "))
	}
	t.Logf("the call ended %v after its supervisor was killed", took)

	reaper, err := New(t.Context(), Options{Service: driver.Service{StateDir: state, Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := reaper.Reap(t.Context())
	reaper.Close()
	if err != nil {
		t.Errorf("Reap() = %v", err)
	}
	t.Logf("reaped after the helper: %+v", rep)
	// The dead instance's name is free again: an executor of that name
	// sees what is left of it.
	again, err := New(t.Context(), Options{Service: driver.Service{StateDir: state, Logger: slog.New(slog.DiscardHandler)}, InstanceID: dead})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if left := leftovers(t, again); len(left) > 0 {
		t.Errorf("left behind after Reap: %q", left)
	}
}
