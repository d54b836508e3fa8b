package sandboxtest

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// timeoutCases check timeouts and cancellation: both end every process
// of the call.
func timeoutCases() []testCase {
	return []testCase{
		{name: "timeout-kills-all", run: testTimeoutKillsAll},
		{name: "timeout-term-ignored", run: testTimeoutTermIgnored},
		{name: "cancel-aborts", run: testCancelAborts},
		{name: "cancel-before-start", run: testCancelBeforeStart},
	}
}

// backgroundSleepers is a command that starts background processes
// carrying marker in their command lines (a subshell, shells with a
// child, a plain sleep), prints "ready" and waits in the foreground.
func backgroundSleepers(marker string) string {
	return "for i in 1 2 3; do sh -c 'sleep " + marker + "; :' & done\n" +
		"( sleep " + marker + "; : ) &\n" +
		"sleep " + marker + " &\n" +
		"echo ready\n" +
		"sleep " + marker + "\n" +
		"echo after-sleep\n"
}

// checkNoSurvivors fails the case when a host process still carries
// marker after the call returned.
func checkNoSurvivors(t *testing.T, marker string) {
	t.Helper()
	if left := hostProcsWith(marker); len(left) > 0 {
		t.Errorf("processes of the call outlived it:\n  %s", strings.Join(left, "\n  "))
	}
}

// visibleDuringCall is a watchWriter callback recording whether the
// call's processes were visible from the host while it ran, so that the
// survivor check is known to mean something.
func visibleDuringCall(marker string, n *atomic.Int64) func() {
	return func() { n.Store(int64(len(hostProcsWith(marker)))) }
}

// logVisibility says when the survivor scan could not see the call's
// processes at all.
func logVisibility(t *testing.T, n *atomic.Int64) {
	t.Helper()
	if n.Load() == 0 {
		t.Logf("the call's processes were not visible from the host while it ran (e.g. gVisor); the survivor scan proves little here")
	}
}

// testTimeoutKillsAll: on timeout the whole container is killed —
// background processes included — and Run returns only when they are
// gone.
func testTimeoutKillsAll(t *testing.T, s *suite) {
	fx := newFixture(t)
	marker := newMarker()
	req := s.request(fx, backgroundSleepers(marker))
	req.TimeoutMs = 3000
	var visible atomic.Int64
	w := newWatchWriter("ready", visibleDuringCall(marker, &visible))
	req.Stdout = w
	res := s.run(t, req)
	if !res.TimedOut || res.Aborted || res.ExitCode != nil || res.TimeoutMs != 3000 {
		t.Errorf("Run(sleeping command, 3000 ms) = %s, TimeoutMs %d; want timed out, not aborted, ExitCode nil, TimeoutMs 3000", describe(res), res.TimeoutMs)
	}
	if got := sandbox.ExitCode(res, nil); got != sandbox.ExitTimeout {
		t.Errorf("ExitCode(%s) = %d, want %d", describe(res), got, sandbox.ExitTimeout)
	}
	if !w.fired() || !strings.Contains(res.Stdout.Text, "ready") {
		t.Errorf("stdout = %q, want %q before the timeout (live writer fired: %v)", res.Stdout.Text, "ready", w.fired())
	}
	if strings.Contains(res.Stdout.Text, "after-sleep") {
		t.Errorf("stdout = %q: the command outlived its timeout", res.Stdout.Text)
	}
	checkNoSurvivors(t, marker)
	logVisibility(t, &visible)
}

// testTimeoutTermIgnored: a command that ignores SIGTERM is killed with
// SIGKILL after the grace period.
func testTimeoutTermIgnored(t *testing.T, s *suite) {
	fx := newFixture(t)
	marker := newMarker()
	req := s.request(fx, "trap '' TERM\n"+backgroundSleepers(marker))
	req.TimeoutMs = 3000
	var visible atomic.Int64
	w := newWatchWriter("ready", visibleDuringCall(marker, &visible))
	req.Stdout = w
	res := s.run(t, req)
	if !w.fired() {
		t.Fatalf("Run(command ignoring SIGTERM, 3000 ms) = %s: it never printed ready, so SIGTERM may have come before the trap", describe(res))
	}
	if !res.TimedOut || res.Aborted || res.ExitCode != nil || res.Signal != "SIGKILL" {
		t.Errorf("Run(command ignoring SIGTERM, 3000 ms) = %s; want timed out, ExitCode nil, Signal SIGKILL", describe(res))
	}
	if got := sandbox.ExitCode(res, nil); got != sandbox.ExitTimeout {
		t.Errorf("ExitCode(%s) = %d, want %d", describe(res), got, sandbox.ExitTimeout)
	}
	checkNoSurvivors(t, marker)
	logVisibility(t, &visible)
}

// testCancelAborts: cancelling the context ends the call as Aborted (not
// TimedOut, not an error) and kills every process.
func testCancelAborts(t *testing.T, s *suite) {
	fx := newFixture(t)
	marker := newMarker()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req := s.request(fx, backgroundSleepers(marker))
	var visible atomic.Int64
	see := visibleDuringCall(marker, &visible)
	req.Stdout = newWatchWriter("ready", func() { see(); cancel() })
	res, err := s.runCtx(ctx, req)
	if err != nil {
		t.Fatalf("Run(cancelled call) error = %v, want a Result with Aborted and a nil error", err)
	}
	if !res.Aborted || res.TimedOut || res.ExitCode != nil {
		t.Errorf("Run(cancelled call) = %s, want aborted, not timed out, ExitCode nil", describe(res))
	}
	if strings.Contains(res.Stdout.Text, "after-sleep") {
		t.Errorf("stdout = %q: the command outlived the cancellation", res.Stdout.Text)
	}
	checkNoSurvivors(t, marker)
	logVisibility(t, &visible)
}

// testCancelBeforeStart: a context cancelled before Run yields an
// Aborted result or a non-ErrInvalid error, promptly, and leaves nothing.
func testCancelBeforeStart(t *testing.T, s *suite) {
	fx := newFixture(t)
	marker := newMarker()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	req := s.request(fx, backgroundSleepers(marker))
	res, err := s.runCtx(ctx, req)
	switch {
	case err != nil && errors.Is(err, sandbox.ErrInvalid):
		t.Errorf("Run(cancelled context) error = %v, want a Result with Aborted or an error of another class than ErrInvalid", err)
	case err == nil && (res == nil || !res.Aborted || res.TimedOut):
		t.Errorf("Run(cancelled context) = %s, nil error; want Aborted", describe(res))
	}
	checkNoSurvivors(t, marker)
	s.checkLeftovers(t)
}
