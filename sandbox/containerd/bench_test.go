package containerd

import (
	"slices"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestBenchCtrRunCases runs the ctr baseline once: it succeeds and
// leaves no container behind; a missing image is an error carrying
// ctr's complaint.
func TestBenchCtrRunCases(t *testing.T) {
	e := newTestExecutor(t)
	d, err := BenchCtrRun(t.Context(), e.opts.Address, e.opts.Namespace, testImage)
	if err != nil || d <= 0 {
		t.Fatalf("BenchCtrRun(%q) = %v, %v; want a duration, nil", testImage, d, err)
	}
	cs, err := e.cli.Containers(e.ctx(t.Context()))
	if err != nil {
		t.Fatalf("Containers() = %v", err)
	}
	if len(cs) != 0 {
		t.Errorf("containers after BenchCtrRun() = %d (first %s), want none", len(cs), cs[0].ID())
	}
	if _, err := BenchCtrRun(t.Context(), e.opts.Address, e.opts.Namespace, "no-such-image:latest"); err == nil {
		t.Errorf("BenchCtrRun(%q) = nil error, want one", "no-such-image:latest")
	}
}

// BenchmarkRunVsCtrRun times a call of `true` on the backend and `ctr
// run --rm` of the same image, interleaved, and reports both medians and
// their ratio (the target: ratio ≤ 0.5).
func BenchmarkRunVsCtrRun(b *testing.B) {
	e := newTestExecutor(b)
	p := testPolicy(b)
	ws := b.TempDir()
	var ours, ctr []time.Duration
	for b.Loop() {
		t := time.Now()
		res, err := e.Run(b.Context(), &sandbox.Request{Command: "true", Policy: p, Session: sandbox.Session{Cwd: ws}})
		if err != nil || sandbox.ExitCode(res, nil) != 0 {
			b.Fatalf("Run(true) = %+v, %v", res, err)
		}
		ours = append(ours, time.Since(t))
		d, err := BenchCtrRun(b.Context(), e.opts.Address, e.opts.Namespace, testImage)
		if err != nil {
			b.Fatalf("BenchCtrRun() = %v", err)
		}
		ctr = append(ctr, d)
	}
	mo, mc := median(ours), median(ctr)
	b.ReportMetric(float64(mo.Microseconds())/1000, "ms/call")
	b.ReportMetric(float64(mc.Microseconds())/1000, "ms/ctr-run")
	b.ReportMetric(float64(mo)/float64(mc), "ratio")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
