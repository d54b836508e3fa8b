//go:build integration

package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Settings of TestServeSoak, from the environment; the defaults keep it
// within a few minutes on 2 cores. The acceptance run of issue 19 is
// DSH_SANDBOX_SOAK_CALLS=10000 with the default 3 kills.
const (
	soakCallsEnv   = "DSH_SANDBOX_SOAK_CALLS"   // calls in all (default 400)
	soakKillsEnv   = "DSH_SANDBOX_SOAK_KILLS"   // kill -9s of the service (default 3)
	soakClientsEnv = "DSH_SANDBOX_SOAK_CLIENTS" // concurrent clients (default 16)
)

// soakMarker is in the command line of every call that sleeps, so that a
// surviving call process can be found on the host.
const soakMarker = "7.0119"

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		t.Fatalf("%s=%q: want a whole number ≥ 0", name, v)
	}
	return n
}

// soakKind is what one call of the soak does and expects.
type soakKind int

const (
	soakEcho    soakKind = iota // prints its number: exit 0, exact stdout
	soakSpill                   // prints more than the tail: exit 0, a spill file
	soakTimeout                 // sleeps past a short timeout: timed out
	soakCancel                  // sleeps; the client gives up: context canceled
)

func (k soakKind) String() string {
	return [...]string{"echo", "spill", "timeout", "cancel"}[k]
}

// soakTally counts the outcomes of the soak's calls.
type soakTally struct {
	mu       sync.Mutex
	outcomes map[string]int
	results  map[string]bool // execution ids of calls that returned a result
}

func (s *soakTally) add(outcome, execID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outcomes[outcome]++
	if execID != "" {
		s.results[execID] = true
	}
}

// TestServeSoak runs many calls through `serve` from concurrent clients,
// with random client cancels, random call timeouts and kill -9s of the
// service (restarted on the same state directory each time), on runc and
// crun. Every call must return the result its command implies or a clear
// error: the client's own cancel, an overload (429), or a broken
// connection to a service that was killed during the call. A call that
// would begin while the service is down waits for its restart. After the last restart, a graceful stop and `reap`, it
// counts what is left, each kind on its own, and wants 0 of each.
func TestServeSoak(t *testing.T) {
	requireRoot(t)
	total := envInt(t, soakCallsEnv, 400)
	kills := envInt(t, soakKillsEnv, 3)
	clients := max(1, envInt(t, soakClientsEnv, 16))
	e := newEnv(t)
	crun := filepath.Join(t.TempDir(), "soak-crun.yaml")
	if err := os.WriteFile(crun, []byte("name: soak-crun\nbackend: oci\nruntime: crun\nimage: host\nworkspace: rw\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"--max-concurrent", "8", "--max-queue", "64", "--policy-file", crun}

	// The current service and the kills begun; down while it restarts.
	// A client whose next call finds it down waits for the restart, as
	// a real one retrying would; calls in flight at a kill see it die.
	var (
		mu     sync.Mutex
		up     = sync.NewCond(&mu)
		sv     = startServe(t, e, args...)
		begun  int // kills begun
		down   bool
		seen   = map[string]bool{}
		leaked []string
	)
	for _, inst := range instances(e) {
		seen[inst] = true
	}
	current := func() (*service, int) {
		mu.Lock()
		defer mu.Unlock()
		for down {
			up.Wait()
		}
		return sv, begun
	}
	killsBegun := func() int {
		mu.Lock()
		defer mu.Unlock()
		return begun
	}
	killAt := map[int64]bool{}
	for k := 1; k <= kills; k++ {
		killAt[int64(k*total/(kills+1))] = true
	}
	kill := func() {
		mu.Lock()
		old := sv
		begun++
		down = true
		mu.Unlock()
		defer func() { // also when startServe fails the test: no client waits forever
			mu.Lock()
			down = false
			mu.Unlock()
			up.Broadcast()
		}()
		old.cmd.Process.Kill()
		<-old.done
		if holders := socketHolders(old.sock); len(holders) > 0 {
			t.Errorf("after kill -9 of serve, processes still hold its listening socket: %q", holders)
		}
		next := startServe(t, e, args...)
		// What the new instance's start-up reap removed of the dead one.
		for _, line := range strings.Split(next.metrics(t), "\n") {
			if strings.HasPrefix(line, "dsh_sandbox_leaked_objects ") {
				leaked = append(leaked, strings.TrimPrefix(line, "dsh_sandbox_leaked_objects "))
			}
		}
		mu.Lock()
		sv = next
		for _, inst := range instances(e) {
			seen[inst] = true
		}
		mu.Unlock()
	}

	tally := &soakTally{outcomes: map[string]int{}, results: map[string]bool{}}
	var next atomic.Int64
	var killing sync.Mutex // one kill at a time; calls go on meanwhile
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), uint64(start.UnixNano())))
			for {
				n := next.Add(1)
				if n > int64(total) {
					return
				}
				if killAt[n] {
					go func() {
						killing.Lock()
						defer killing.Unlock()
						kill()
					}()
				}
				soakCall(t, rng, e, c, n, current, killsBegun, tally)
			}
		})
	}
	wg.Wait()
	killing.Lock() // a kill started by the last calls has finished
	killing.Unlock()
	elapsed := time.Since(start)
	final, killed := current()

	tally.mu.Lock()
	t.Logf("%d calls from %d clients in %s (%.1f calls/s), %d kill -9s (objects the restarts reaped: %s): outcomes %v",
		total, clients, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), killed, strings.Join(leaked, ", "), tally.outcomes)
	if tally.outcomes["unexpected"] > 0 {
		t.Errorf("%d calls ended in neither their result nor a clear error", tally.outcomes["unexpected"])
	}
	tally.mu.Unlock()

	// The service still serves after all that.
	if resp, err := final.cl.Run(context.Background(), types.RunRequest{Policy: "workspace-write", Command: "echo alive"}); err != nil || resp.Result.Stdout.Text != "alive\n" {
		t.Errorf("Run after the soak = %+v, %v", resp, err)
	}
	final.stop(t)
	r := run(t, nil, append(append([]string{"reap"}, e.flags("")...), "--json")...)
	if r.code != 0 {
		t.Errorf("reap after the soak = %d %q %q", r.code, r.stdout, r.stderr)
	}
	t.Logf("reap after the last stop: %s", strings.TrimSpace(r.stdout))

	mu.Lock()
	var insts []string
	for inst := range seen {
		insts = append(insts, inst)
	}
	mu.Unlock()
	counts := soakLeftovers(t, e, insts, tally.results)
	var names []string
	for k := range counts {
		names = append(names, k)
	}
	slices.Sort(names)
	var line []string
	for _, k := range names {
		line = append(line, fmt.Sprintf("%s %d", k, len(counts[k])))
		if len(counts[k]) > 0 {
			t.Errorf("left behind after the soak, the last restart and reap: %d %s: %q", len(counts[k]), k, counts[k])
		}
	}
	t.Logf("leftovers of %d instances: %s", len(insts), strings.Join(line, ", "))
	t.Logf("spill files in session directories of calls without a result (the sessions', kept for their retention): %d", len(sessionSpills(e, tally.results)))
}

// soakCall makes call n of client c and records its outcome.
func soakCall(t *testing.T, rng *rand.Rand, e env, c int, n int64, current func() (*service, int), killsBegun func() int, tally *soakTally) {
	kind := soakKind(rng.IntN(4))
	if rng.IntN(2) == 0 { // half the calls are plain echoes
		kind = soakEcho
	}
	req := types.RunRequest{Policy: "workspace-write", Command: fmt.Sprintf("echo soak-%d", n)}
	if rng.IntN(2) == 0 {
		req.Policy = "soak-crun"
	}
	if rng.IntN(2) == 0 {
		req.Session = e.header(fmt.Sprintf("soak-%d", c))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	switch kind {
	case soakSpill:
		req.Command = "seq 1 60000"
	case soakTimeout:
		req.Command = "sleep " + soakMarker
		req.TimeoutMs = 50 + rng.Int64N(450)
	case soakCancel:
		req.Command = "sleep " + soakMarker
		after := time.Duration(20+rng.IntN(480)) * time.Millisecond
		var stop context.CancelFunc
		ctx, stop = context.WithCancel(ctx)
		defer stop()
		time.AfterFunc(after, stop)
	}
	sv, before := current()
	resp, err := sv.cl.Run(ctx, req)
	killed := killsBegun() != before

	outcome := soakOutcome(kind, resp, err, ctx, killed)
	var execID string
	if resp != nil {
		execID = resp.ExecutionID
	}
	tally.add(outcome, execID)
	if outcome == "unexpected" {
		t.Logf("call %d (%s, %s): %+v, %v (service killed during it: %t)", n, kind, req.Policy, resp, err, killed)
	}
}

// soakOutcome names how a call ended, "unexpected" when it is neither
// the result its kind implies nor a clear error.
func soakOutcome(kind soakKind, resp *types.RunResponse, err error, ctx context.Context, killed bool) string {
	if err != nil {
		switch {
		case kind == soakCancel && errors.Is(err, context.Canceled) && ctx.Err() != nil:
			return "canceled"
		case errors.Is(err, types.ErrOverloaded):
			return "overloaded"
		case killed && brokenConnection(err):
			return "service killed"
		}
		return "unexpected"
	}
	res := resp.Result
	if res == nil {
		return "unexpected"
	}
	exit0 := res.ExitCode != nil && *res.ExitCode == 0
	switch kind {
	case soakEcho:
		if exit0 && strings.HasPrefix(res.Stdout.Text, "soak-") {
			return "ok"
		}
	case soakSpill:
		if exit0 && res.Stdout.Truncated && res.Stdout.SpillPath != "" {
			return "ok spilled"
		}
	case soakTimeout:
		if res.TimedOut {
			return "timed out"
		}
	case soakCancel:
		// The service answered before the client gave up: only a
		// result that is no success can be one for a 7 s sleep.
		if !exit0 && (res.Aborted || res.TimedOut) {
			return "aborted"
		}
	}
	return "unexpected"
}

// brokenConnection reports whether err is the client's view of a service
// that died or was not there: refused, reset, cut short.
func brokenConnection(err error) bool {
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ENOENT, syscall.EPIPE} {
		if errors.Is(err, errno) {
			return true
		}
	}
	msg := err.Error()
	return strings.Contains(msg, "EOF") || strings.Contains(msg, "connection reset") ||
		strings.Contains(msg, "connection refused") || strings.Contains(msg, "no such file")
}

// bundleSummary names a leftover bundle directory with what it holds
// and its age, which tell why Reap kept it.
func bundleSummary(dir string) string {
	var names []string
	ents, _ := os.ReadDir(dir)
	for _, ent := range ents {
		names = append(names, ent.Name())
	}
	age := "?"
	if fi, err := os.Lstat(dir); err == nil {
		age = time.Since(fi.ModTime()).Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%s (age %s, holds %s)", filepath.Base(dir), age, strings.Join(names, " "))
}

// soakLeftovers counts, by kind, what calls left on the host: containers
// per runtime, bundles, mounts under the state directory, cgroups of the
// given instances, network namespaces, call processes, spill files in the
// state directory of calls that returned no result, and lock files of
// instances. A session's spill directory is not counted: it is the
// session's, in its transcript directory, bounded by the spill retention
// like every spill file there (sessionSpills lists those of calls that
// returned no result).
func soakLeftovers(t *testing.T, e env, insts []string, results map[string]bool) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	add := func(kind string, items ...string) { out[kind] = append(out[kind], items...) }
	for _, rt := range []string{"runc", "crun"} {
		add("containers " + rt)
		list, err := exec.Command(rt, "--root", filepath.Join(e.state, "runtime", rt), "list", "-q").Output()
		if err == nil {
			add("containers "+rt, strings.Fields(string(list))...)
		}
	}
	add("bundles")
	if ents, err := os.ReadDir(filepath.Join(e.state, "bundles")); err == nil {
		for _, ent := range ents {
			add("bundles", bundleSummary(filepath.Join(e.state, "bundles", ent.Name())))
		}
	}
	add("mounts")
	add("network namespaces")
	mountinfo, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mountinfo), "\n") {
		under := strings.Contains(line, e.state) || strings.Contains(line, e.home)
		switch {
		case under && strings.Contains(line, " - nsfs "):
			add("network namespaces", line)
		case under:
			add("mounts", line)
		}
	}
	if ents, err := os.ReadDir("/run/netns"); err == nil {
		for _, ent := range ents {
			for _, inst := range insts {
				if strings.Contains(ent.Name(), inst) {
					add("network namespaces", "/run/netns/"+ent.Name())
				}
			}
		}
	}
	add("cgroups")
	for _, inst := range insts {
		for _, pattern := range []string{"/sys/fs/cgroup/*/dsh-sandbox/" + inst, "/sys/fs/cgroup/dsh-sandbox/" + inst} {
			m, _ := filepath.Glob(pattern)
			add("cgroups", m...)
		}
	}
	add("call processes", processesWith("sleep "+soakMarker)...)
	add("spill files of calls without a result")
	spills, _ := filepath.Glob(filepath.Join(e.state, "spill", "*"))
	for _, f := range spills {
		id := strings.TrimSuffix(strings.TrimSuffix(filepath.Base(f), ".stdout"), ".stderr")
		if !results[id] {
			add("spill files of calls without a result", f)
		}
	}
	add("instance lock files", func() []string {
		locks, _ := filepath.Glob(filepath.Join(e.state, "instances", "*.lock"))
		return locks
	}()...)
	return out
}

// TestSoakOutcomeCases: the soak's judgement of one call, legitimate and
// not.
func TestSoakOutcomeCases(t *testing.T) {
	zero, one := 0, 1
	res := func(r types.RunResponse) *types.RunResponse { return &r }
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	live := context.Background()
	for _, c := range []struct {
		kind   soakKind
		resp   *types.RunResponse
		err    error
		ctx    context.Context
		killed bool
		want   string
	}{
		{soakEcho, res(types.RunResponse{Result: resultWith(&zero, "soak-1\n")}), nil, live, false, "ok"},
		{soakEcho, res(types.RunResponse{Result: resultWith(&one, "soak-1\n")}), nil, live, false, "unexpected"},
		{soakEcho, nil, fmt.Errorf("post: %w", syscall.ECONNREFUSED), live, true, "service killed"},
		{soakEcho, nil, fmt.Errorf("post: %w", syscall.ECONNREFUSED), live, false, "unexpected"},
		{soakEcho, nil, errors.New("internal: boom"), live, true, "unexpected"},
		{soakEcho, nil, fmt.Errorf("busy: %w", types.ErrOverloaded), live, false, "overloaded"},
		{soakCancel, nil, context.Canceled, canceled, false, "canceled"},
		{soakCancel, nil, context.Canceled, live, false, "unexpected"},
		{soakEcho, nil, context.Canceled, canceled, false, "unexpected"},
		{soakTimeout, res(types.RunResponse{Result: timedOut()}), nil, live, false, "timed out"},
		{soakTimeout, res(types.RunResponse{Result: resultWith(&zero, "")}), nil, live, false, "unexpected"},
		{soakCancel, res(types.RunResponse{Result: resultWith(&zero, "")}), nil, live, false, "unexpected"},
	} {
		if got := soakOutcome(c.kind, c.resp, c.err, c.ctx, c.killed); got != c.want {
			t.Errorf("soakOutcome(%s, %v, killed %t) = %q, want %q", c.kind, c.err, c.killed, got, c.want)
		}
	}
}

func resultWith(exit *int, stdout string) *sandbox.Result {
	return &sandbox.Result{ExitCode: exit, Stdout: sandbox.Stream{Text: stdout}}
}

func timedOut() *sandbox.Result {
	return &sandbox.Result{TimedOut: true, Signal: "SIGKILL"}
}

// socketHolders lists the processes (pid and command line) that hold the
// listening Unix socket bound at path open.
func socketHolders(path string) []string {
	data, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return nil
	}
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 8 && f[7] == path {
			inodes["socket:["+f[6]+"]"] = true
		}
	}
	var out []string
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		fds, err := os.ReadDir(filepath.Join("/proc", p.Name(), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join("/proc", p.Name(), "fd", fd.Name()))
			if err == nil && inodes[link] {
				cmdline, _ := os.ReadFile(filepath.Join("/proc", p.Name(), "cmdline"))
				out = append(out, p.Name()+" "+strings.ReplaceAll(string(cmdline), "\x00", " "))
				break
			}
		}
	}
	return out
}

// sessionSpills lists the spill files in the sessions' transcript
// directories of calls that returned no result.
func sessionSpills(e env, results map[string]bool) []string {
	var out []string
	_ = filepath.WalkDir(e.root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || filepath.Base(filepath.Dir(p)) != "spill" {
			return nil
		}
		id := strings.TrimSuffix(strings.TrimSuffix(d.Name(), ".stdout"), ".stderr")
		if !results[id] {
			out = append(out, p)
		}
		return nil
	})
	return out
}
