package containerd

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
const lifelineHelperEnv = "CONTAINERD_TEST_LIFELINE_HELPER"

// runLifelineHelper runs, as instance $CONTAINERD_TEST_INSTANCE on
// state directory $CONTAINERD_TEST_STATE, one call that prints
// "started" and then sleeps $CONTAINERD_TEST_MARKER seconds, and waits
// for it: the test kills this process with SIGKILL while the call runs.
func runLifelineHelper() int {
	e, err := New(context.Background(), Options{Address: os.Getenv("DSH_SANDBOX_TEST_CONTAINERD"), Namespace: testNamespace,
		StateDir: os.Getenv("CONTAINERD_TEST_STATE"), InstanceID: os.Getenv("CONTAINERD_TEST_INSTANCE"), Logger: zerolog.Nop()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	p, _ := policy.Builtin(policy.WorkspaceWrite)
	p.Backend, p.Image = Backend, testImage
	res, err := e.Run(context.Background(), &sandbox.Request{
		Command: "echo started; sleep " + os.Getenv("CONTAINERD_TEST_MARKER"),
		Policy:  p,
		Session: sandbox.Session{ID: "s", Cwd: os.Getenv("CONTAINERD_TEST_CWD")},
		Stdout:  os.Stdout,
	})
	fmt.Fprintln(os.Stderr, "the call returned although the test should have killed its supervisor:", res, err)
	return 1
}

// TestLifelineKilledSupervisor: kill -9 of the process that supervises
// a running call ends the call within 2 s — the call's lifeline FIFO
// loses its only writer, the stub kills everything and exits — with no
// reap; a reap afterwards leaves nothing of the dead instance.
func TestLifelineKilledSupervisor(t *testing.T) {
	e := newTestExecutor(t) // imports the test image
	state := testStateDir(t)
	dead := "lifeline-" + e.instance
	marker := fmt.Sprintf("%d%d", 8500000, os.Getpid())
	ws := t.TempDir()
	os.Chmod(ws, 0o777)
	took, left := fixtures.KillSupervisor(t, []string{lifelineHelperEnv + "=1", "CONTAINERD_TEST_STATE=" + state, "CONTAINERD_TEST_INSTANCE=" + dead,
		"CONTAINERD_TEST_MARKER=" + marker, "CONTAINERD_TEST_CWD=" + ws}, marker, 2*time.Second)
	if len(left) > 0 {
		t.Errorf("%v after kill -9 of the supervisor, the call still runs:\n  %s", took, strings.Join(left, "\n  "))
	}
	t.Logf("the call ended %v after its supervisor was killed", took)

	addr := testAddress(t)
	reaper, err := New(t.Context(), Options{Address: addr, Namespace: testNamespace, StateDir: state, Logger: zerolog.New(zerolog.NewTestWriter(t))})
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
	again, err := New(t.Context(), Options{Address: addr, Namespace: testNamespace, StateDir: state, InstanceID: dead, Logger: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if left := leftovers(t, again); len(left) > 0 {
		t.Errorf("left behind after Reap: %q", left)
	}
}
