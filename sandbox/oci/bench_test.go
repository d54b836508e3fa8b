package oci

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/pool"
)

// reportMedian reports the median of ds in milliseconds.
func reportMedian(b *testing.B, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/float64(time.Millisecond), "median-ms")
}

// BenchmarkRun times one whole call of `true` per runtime: prepare,
// bundle, run, teardown, under the built-in workspace-write policy.
func BenchmarkRun(b *testing.B) {
	for _, rt := range runtimes {
		b.Run(rt, func(b *testing.B) {
			e := newTestExecutor(b, rt)
			req := &sandbox.Request{Command: "true", Policy: testPolicy(b, rt)}
			ds := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t := time.Now()
				res, err := e.Run(context.Background(), req)
				ds = append(ds, time.Since(t))
				if err != nil || sandbox.ExitCode(res, nil) != 0 {
					b.Fatalf("Run(true) = %+v, %v", res, err)
				}
			}
			b.StopTimer()
			reportMedian(b, ds)
		})
	}
}

// benchRaw times BenchRaw of runtime rt.
func benchRaw(b *testing.B, rt string) {
	requireRuntime(b, rt)
	path, _ := exec.LookPath(rt)
	state := b.TempDir()
	ds := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d, err := BenchRaw(context.Background(), path, state)
		if err != nil {
			b.Fatalf("BenchRaw(%s) = %v", rt, err)
		}
		ds = append(ds, d)
	}
	b.StopTimer()
	reportMedian(b, ds)
}

// BenchmarkRawRunc is the baseline of BenchmarkRun/runc: a bare `runc
// run` of an equally hardened hand-made bundle running `true`.
func BenchmarkRawRunc(b *testing.B) { benchRaw(b, RuntimeRunc) }

// BenchmarkRawCrun is the same baseline for crun.
func BenchmarkRawCrun(b *testing.B) { benchRaw(b, RuntimeCrun) }

// TestBenchRawLeavesNothing runs the raw baseline once per runtime and
// checks it succeeded and cleaned up.
func TestBenchRawLeavesNothing(t *testing.T) {
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			requireRuntime(t, rt)
			path, _ := exec.LookPath(rt)
			state := testStateDir(t)
			d, err := BenchRaw(context.Background(), path, state)
			if err != nil || d <= 0 {
				t.Fatalf("BenchRaw(%s) = %v, %v", rt, d, err)
			}
			e, err := New(Options{Runtime: rt, Service: driver.Service{StateDir: state}})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			if left := leftovers(t, e); len(left) > 0 {
				t.Errorf("BenchRaw left: %q", left)
			}
			layout, _ := readCgroupLayout()
			for _, dir := range layout.dirsFor("/" + cgroupParent) {
				entries, _ := readDirNames(dir)
				for _, n := range entries {
					if len(n) > 10 && n[:10] == "bench-raw-" {
						t.Errorf("BenchRaw left cgroup %s/%s", dir, n)
					}
				}
			}
		})
	}
}

// BenchmarkWarmRun times one session's sequential calls of `true` with
// the warm pool on, each waiting for its slot first (so every call is a
// hit): the executor's hand-out, bind and run without the container's
// start. Reports the median and the medians of the phases.
func BenchmarkWarmRun(b *testing.B) {
	for _, rt := range []string{RuntimeRunc, RuntimeCrun} {
		b.Run(rt, func(b *testing.B) {
			requireRuntime(b, rt)
			e, err := New(Options{Runtime: rt, Service: driver.Service{StateDir: testStateDir(b), Logger: testLogger(b)}, Pool: &pool.Options{}})
			if err != nil {
				b.Fatal(err)
			}
			defer e.Close()
			req := &sandbox.Request{Command: "true", Policy: testPolicy(b, rt), Session: sandbox.Session{ID: "bench", Cwd: b.TempDir()}}
			if _, err := e.Run(context.Background(), req); err != nil {
				b.Fatal(err)
			}
			var ds, prep, take, bind []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				for e.warm.pool.Size().Ready == 0 {
					time.Sleep(time.Millisecond)
				}
				b.StartTimer()
				t := time.Now()
				res, err := e.Run(context.Background(), req)
				ds = append(ds, time.Since(t))
				if err != nil || sandbox.ExitCode(res, nil) != 0 || res.Timings.Pool != sandbox.PoolHit {
					b.Fatalf("Run(true) = %+v, %v; want a pool hit", res, err)
				}
				prep, take, bind = append(prep, res.Timings.Prepare), append(take, res.Timings.Create), append(bind, res.Timings.Bind)
			}
			b.StopTimer()
			reportMedian(b, ds)
			for name, xs := range map[string][]time.Duration{"prepare": prep, "take": take, "bind": bind} {
				slices.Sort(xs)
				b.ReportMetric(float64(xs[len(xs)/2])/float64(time.Millisecond), name+"-ms")
			}
		})
	}
}
