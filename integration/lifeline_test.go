//go:build integration

package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
)

// lifelineMarker is in the command line of the calls TestServeKilledLifeline
// leaves running when it kills the service.
const lifelineMarker = "7.0127"

// TestServeKilledLifeline: kill -9 of serve with 3 calls running and a
// full warm pool. Within 2 s no call process is left (each container's
// stub sees its control channel end, and the kernel ends its pid
// namespace); after a restart of serve (which reaps its dead
// predecessor), a graceful stop and `reap`, nothing of the dead instance
// is left: containers of either runtime, prepared slots, bundles,
// mounts, cgroups, network namespaces, spill files, lock files.
func TestServeKilledLifeline(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	// A pool of 3: the 3 sessions' first calls fill it (one workspace:
	// their slots share a key, the session directory is mounted at Bind).
	args := []string{"--pool-max", "3", "--pool-per-key", "3", "--max-concurrent", "8"}
	sv := startServe(t, e, args...)
	dead := instances(e)
	sessions := []string{"life-a", "life-b", "life-c"}
	for _, id := range sessions {
		resp, err := sv.cl.Run(context.Background(), types.RunRequest{Policy: "workspace-write", Session: e.header(id), Command: "true"})
		if err != nil || resp.Result.ExitCode == nil || *resp.Result.ExitCode != 0 {
			t.Fatalf("first call of %s = %+v, %v", id, resp, err)
		}
	}
	full := func() bool { return strings.Contains(sv.metrics(t), "dsh_sandbox_pool_ready 3") }
	for deadline := time.Now().Add(60 * time.Second); !full(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not fill with 3 prepared containers:\n%s", poolLines(sv.metrics(t)))
		}
	}

	// 3 calls that would run for 2 minutes, each in the slot its session
	// had prepared; their refills keep the pool full.
	var wg sync.WaitGroup
	for _, id := range sessions {
		wg.Go(func() {
			_, _ = sv.cl.Run(context.Background(), types.RunRequest{
				Policy: "workspace-write", Session: e.header(id), Command: "sleep " + lifelineMarker + "; sleep 120",
			})
		})
	}
	for deadline := time.Now().Add(60 * time.Second); len(processesWith("sleep "+lifelineMarker)) < 3; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("3 calls did not start: %q", processesWith("sleep "+lifelineMarker))
		}
	}
	// The refills the 3 calls started are ready: the pool is full again.
	for deadline := time.Now().Add(60 * time.Second); !full(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not fill again while the calls ran:\n%s", poolLines(sv.metrics(t)))
		}
	}
	t.Logf("before the kill: %s", strings.Join(poolLines(sv.metrics(t)), ", "))

	sv.cmd.Process.Kill()
	<-sv.done
	killed := time.Now()
	left := processesWith("sleep " + lifelineMarker)
	for len(left) > 0 && time.Since(killed) < 2*time.Second {
		time.Sleep(5 * time.Millisecond)
		left = processesWith("sleep " + lifelineMarker)
	}
	took := time.Since(killed)
	if len(left) > 0 {
		t.Errorf("%v after kill -9 of serve, call processes still run: %q", took.Round(time.Millisecond), left)
	} else {
		t.Logf("the 3 calls ended %v after kill -9 of serve", took.Round(time.Millisecond))
	}
	wg.Wait() // the clients saw their connections break

	// Restart (its start-up reap removes the dead instance's objects),
	// stop gracefully, reap, count.
	next := startServe(t, e, args...)
	var reaped []string
	for _, line := range strings.Split(next.metrics(t), "\n") {
		if strings.HasPrefix(line, "dsh_sandbox_leaked_objects ") {
			reaped = append(reaped, strings.TrimPrefix(line, "dsh_sandbox_leaked_objects "))
		}
	}
	t.Logf("objects the restart reaped of the dead instance: %s", strings.Join(reaped, ", "))
	insts := append(dead, instances(e)...)
	next.stop(t)
	r := run(t, nil, append(append([]string{"reap"}, e.flags("")...), "--json")...)
	if r.code != 0 {
		t.Fatalf("reap = %d %q %q", r.code, r.stdout, r.stderr)
	}
	counts := soakLeftovers(t, e, insts, nil)
	delete(counts, "call processes") // the soak's marker; this test's is counted below
	counts["call processes"] = processesWith("sleep " + lifelineMarker)
	var names, line []string
	for k := range counts {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		line = append(line, fmt.Sprintf("%s %d", k, len(counts[k])))
		if len(counts[k]) > 0 {
			t.Errorf("left behind after kill -9, restart and reap: %d %s: %q", len(counts[k]), k, counts[k])
		}
	}
	t.Logf("leftovers: %s", strings.Join(line, ", "))
}

// poolLines are the pool's gauges and counters in a metrics page.
func poolLines(metrics string) []string {
	var out []string
	for _, l := range strings.Split(metrics, "\n") {
		if strings.HasPrefix(l, "dsh_sandbox_pool_") && !strings.Contains(l, "_bucket") {
			out = append(out, l)
		}
	}
	return out
}
