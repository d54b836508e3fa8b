package docker

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// lifelineHelperEnv makes the test binary a supervisor of one call (see
// runLifelineHelper) instead of running the tests.
const lifelineHelperEnv = "DOCKER_TEST_LIFELINE_HELPER"

// runLifelineHelper runs, as instance $DOCKER_TEST_INSTANCE on state
// directory $DOCKER_TEST_STATE, one call that prints "started" and then
// sleeps $DOCKER_TEST_MARKER seconds, and waits for it: the test kills
// this process with SIGKILL while the call runs.
func runLifelineHelper() int {
	e, err := New(context.Background(), Options{StateDir: os.Getenv("DOCKER_TEST_STATE"), InstanceID: os.Getenv("DOCKER_TEST_INSTANCE"), Logger: zerolog.Nop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p, _ := policy.Builtin(policy.WorkspaceWrite)
	p.Backend, p.Image = Backend, testImage
	res, err := e.Run(context.Background(), &sandbox.Request{
		Command: "echo started; sleep " + os.Getenv("DOCKER_TEST_MARKER"),
		Policy:  p,
		Session: sandbox.Session{ID: "s", Cwd: os.Getenv("DOCKER_TEST_CWD")},
		Stdout:  os.Stdout,
	})
	fmt.Fprintln(os.Stderr, "the call returned although the test should have killed its supervisor:", res, err)
	return 1
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
	took, left := fixtures.KillSupervisor(t, []string{lifelineHelperEnv + "=1", "DOCKER_TEST_STATE=" + state, "DOCKER_TEST_INSTANCE=" + dead,
		"DOCKER_TEST_MARKER=" + marker, "DOCKER_TEST_CWD=" + t.TempDir()}, marker, 2*time.Second)
	if len(left) > 0 {
		t.Errorf("%v after kill -9 of the supervisor, the call still runs:\n  %s", took, strings.Join(left, "\n  "))
	}
	t.Logf("the call ended %v after its supervisor was killed", took)

	reaper, err := New(t.Context(), Options{StateDir: state, Logger: zerolog.New(zerolog.NewTestWriter(t))})
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
	again, err := New(t.Context(), Options{StateDir: state, InstanceID: dead, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if left := leftovers(t, again); len(left) > 0 {
		t.Errorf("left behind after Reap: %q", left)
	}
}
