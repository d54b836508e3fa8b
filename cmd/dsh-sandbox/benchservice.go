package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/api/client"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/render"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

func benchServiceCommand() *cli.Command {
	return &cli.Command{
		Name:  "service",
		Usage: "latency and throughput of a running service's calls: one session, new sessions, concurrent clients",
		Description: `Measures the service path end to end: each call is a POST /v1/run of "true" from
this process to a running serve (--server), timed from the client's side, on kept-alive
connections. Four series, one after the other:

  sequential       --n calls of one session, back to back
  paced            --n calls of another session, --pause apart (an agent thinks
                   between calls; the service may prepare the next one meanwhile)
  new session      --n calls, each the first call of a new session
  concurrent       --clients clients, each its own session, --n calls in all

Each series reports p50, p95, p99, min and max, and how many calls came from the warm
pool (the result's timings.pool); the concurrent series also calls per second. With
--server-pid, each series also reports the CPU time the service spent per call, its runtime
processes and containers included (measured 1 s after the series' last call, so that
background teardowns count). The
first call of each series warms up and is not counted. The sessions' working directory is a
temporary directory made here (the service must accept it as a workspace: see
--workspace-roots of serve). Never fails on a slow result.

Example:
   dsh-sandbox serve &
   dsh-sandbox bench service --n 200 --clients 16`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "server", Usage: "the service at `ADDR` (unix:///PATH or tcp://HOST:PORT; default unix://<home>/run/sandbox.sock)"},
			&cli.StringFlag{Name: "token-file", Usage: "`FILE` holding the bearer token for a TCP service"},
			&cli.StringFlag{Name: "policy", Value: "workspace-write", Usage: "the policy `NAME` the calls name (one the service knows)"},
			&cli.IntFlag{Name: "n", Value: 200, Usage: "calls per series"},
			&cli.IntFlag{Name: "clients", Value: 16, Usage: "clients of the concurrent series"},
			&cli.DurationFlag{Name: "pause", Value: 100 * time.Millisecond, Usage: "time between the paced series' calls"},
			&cli.IntFlag{Name: "server-pid", Usage: "the service's `PID` on this machine: each series then reports the CPU time per call of the service and its runtimes (from /proc/PID/stat, children included)"},
			jsonFlag,
		},
		Action: runBenchService,
	}
}

// serviceRow is one series of bench service.
type serviceRow struct {
	Name         string  `json:"name"`
	N            int     `json:"n"`
	P50Ms        float64 `json:"p50Ms"`
	P95Ms        float64 `json:"p95Ms"`
	P99Ms        float64 `json:"p99Ms"`
	MinMs        float64 `json:"minMs"`
	MaxMs        float64 `json:"maxMs"`
	PoolHits     int     `json:"poolHits"`
	PoolMisses   int     `json:"poolMisses"`
	CallsPerSec  float64 `json:"callsPerSec,omitempty"`
	CPUMsPerCall float64 `json:"cpuMsPerCall,omitempty"`
	Error        string  `json:"error,omitempty"`
}

func runBenchService(c *cli.Context) error {
	s, err := loadSettings(c)
	if err != nil {
		return err
	}
	n, clients := c.Int("n"), c.Int("clients")
	if n < 1 || n > 100000 {
		return usageError("--n: must be between 1 and 100000, got %d", n)
	}
	if clients < 1 || clients > 1024 {
		return usageError("--clients: must be between 1 and 1024, got %d", clients)
	}
	if c.Duration("pause") < 0 {
		return usageError("--pause: must not be negative")
	}
	cl, addr, err := serviceClient(c, s)
	if err != nil {
		return err
	}
	ctx := c.Context
	if err := cl.Health(ctx); err != nil {
		return remoteError(addr, err)
	}
	work, err := os.MkdirTemp("", "dsh-sandbox-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}
	b := &serviceBench{cl: cl, policy: c.String("policy"), cwd: work, run: newID(), pid: c.Int("server-pid")}
	if b.pid != 0 {
		if _, err := processCPU(b.pid); err != nil {
			return usageError("--server-pid: %v", err)
		}
	}

	var rows []serviceRow
	one := b.sessionID("sequential")
	rows = append(rows, b.series(ctx, "sequential", n, 1, 0, func(int) string { return one }))
	paced := b.sessionID("paced")
	rows = append(rows, b.series(ctx, "paced", n, 1, c.Duration("pause"), func(int) string { return paced }))
	rows = append(rows, b.series(ctx, "new session", n, 1, 0, func(i int) string { return b.sessionID(fmt.Sprintf("new-%d", i)) }))
	rows = append(rows, b.series(ctx, fmt.Sprintf("concurrent ×%d", clients), n, clients, 0, func(i int) string {
		return b.sessionID(fmt.Sprintf("client-%d", i%clients))
	}))
	if err := ctx.Err(); err != nil {
		return err
	}

	if c.Bool("json") {
		return writeJSON(c.App.Writer, struct {
			Rows []serviceRow `json:"rows"`
		}{rows})
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "series\tp50 ms\tp95 ms\tp99 ms\tmin ms\tmax ms\tpool hits\tmisses\tcalls/s\tcpu ms/call\tn\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%d\t%s\t%s\t%d\t\n", r.Name, r.P50Ms, r.P95Ms, r.P99Ms,
			r.MinMs, r.MaxMs, r.PoolHits, r.PoolMisses, optional(r.CallsPerSec, "%.1f"), optional(r.CPUMsPerCall, "%.1f"), r.N)
	}
	tw.Flush()
	for _, r := range rows {
		if r.Error != "" {
			fmt.Fprintf(c.App.Writer, "%s: %s\n", r.Name, r.Error)
		}
	}
	return nil
}

// serviceBench runs the calls of bench service.
type serviceBench struct {
	cl     *client.Client
	policy string
	cwd    string
	run    string // this run's id, in every session id
	pid    int    // the service's pid; 0: CPU time not measured
}

// processCPU is the CPU time of process pid and of its children it has
// waited for (utime, stime, cutime, cstime of /proc/PID/stat).
func processCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count from its ")".
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 15 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ticks int64
	for _, v := range f[11:15] { // fields 14–17
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every Linux architecture Go supports.
const clockTicks = 100

func newID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (b *serviceBench) sessionID(name string) string {
	return "bench-" + b.run + "-" + name
}

// call runs true in session id and times it from here.
func (b *serviceBench) call(ctx context.Context, id string) (time.Duration, string, error) {
	start := time.Now()
	resp, err := b.cl.Run(ctx, types.RunRequest{
		Session: &session.Header{ID: id, CreatedAt: time.Now().UnixMilli(), Cwd: b.cwd},
		Policy:  b.policy,
		Command: "true",
	})
	d := time.Since(start)
	if err != nil {
		return d, "", err
	}
	if res := resp.Result; res.ExitCode == nil || *res.ExitCode != 0 {
		return d, "", fmt.Errorf("true did not exit 0: %s", render.Result(res))
	}
	return d, resp.Result.Timings.Pool, nil
}

// series runs n calls (plus one uncounted warm-up) from clients clients,
// pause apart per client; session names the session of the i-th call.
func (b *serviceBench) series(ctx context.Context, name string, n, clients int, pause time.Duration, session func(i int) string) serviceRow {
	row := serviceRow{Name: name}
	if _, _, err := b.call(ctx, session(-1)); err != nil {
		row.Error = err.Error()
		return row
	}
	var (
		mu       sync.Mutex
		samples  []time.Duration
		next     int
		firstErr error
		wg       sync.WaitGroup
	)
	var cpu0 time.Duration
	if b.pid != 0 {
		cpu0, _ = processCPU(b.pid)
	}
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n || ctx.Err() != nil {
					return
				}
				d, pool, err := b.call(ctx, session(i))
				mu.Lock()
				switch {
				case err != nil:
					if firstErr == nil {
						firstErr = err
					}
				default:
					samples = append(samples, d)
					switch pool {
					case sandbox.PoolHit:
						row.PoolHits++
					case sandbox.PoolMiss:
						row.PoolMisses++
					}
				}
				mu.Unlock()
				if pause > 0 {
					select {
					case <-time.After(pause):
					case <-ctx.Done():
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if b.pid != 0 {
		time.Sleep(time.Second)
		if cpu1, err := processCPU(b.pid); err == nil && len(samples) > 0 {
			row.CPUMsPerCall = ms(cpu1-cpu0) / float64(len(samples))
		}
	}
	if firstErr != nil {
		row.Error = firstErr.Error()
	}
	row.N = len(samples)
	if row.N == 0 {
		return row
	}
	slices.Sort(samples)
	row.P50Ms, row.P95Ms, row.P99Ms = ms(percentile(samples, 50)), ms(percentile(samples, 95)), ms(percentile(samples, 99))
	row.MinMs, row.MaxMs = ms(samples[0]), ms(samples[len(samples)-1])
	if clients > 1 {
		row.CallsPerSec = float64(row.N) / elapsed.Seconds()
	}
	return row
}

// percentile is the nearest-rank p-th percentile of sorted.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (p*len(sorted) + 99) / 100
	return sorted[max(i-1, 0)]
}
