package docker

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// BenchmarkRunTrue measures one call of `true`: create, attach, start,
// wait, removal. Besides the mean it reports the median of the calls and
// of each phase of Result.Timings, in milliseconds.
func BenchmarkRunTrue(b *testing.B) {
	e := newTestExecutor(b)
	req := &sandbox.Request{Command: "true", Session: sandbox.Session{Cwd: b.TempDir()}, Policy: testPolicy(b)}
	var total, prepare, create, run, teardown []time.Duration
	for b.Loop() {
		t := time.Now()
		res, err := e.Run(b.Context(), req)
		total = append(total, time.Since(t))
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("Run(%q) = %+v, %v; want exit 0", req.Command, res, err)
		}
		prepare, create = append(prepare, res.Timings.Prepare), append(create, res.Timings.Create)
		run, teardown = append(run, res.Timings.Run), append(teardown, res.Timings.Teardown)
	}
	b.ReportMetric(medianMs(total), "median-ms")
	b.ReportMetric(medianMs(prepare), "prepare-ms")
	b.ReportMetric(medianMs(create), "create-ms")
	b.ReportMetric(medianMs(run), "run-ms")
	b.ReportMetric(medianMs(teardown), "teardown-ms")
}

// BenchmarkRunTrueVsDockerRun alternates a call of `true` through the
// executor with the BenchDockerRun baseline, so that both see the same
// load, and reports both medians and their ratio (the target is ≤ 0.6).
func BenchmarkRunTrueVsDockerRun(b *testing.B) {
	e := newTestExecutor(b)
	req := &sandbox.Request{Command: "true", Session: sandbox.Session{Cwd: b.TempDir()}, Policy: testPolicy(b)}
	var backend, baseline []time.Duration
	for b.Loop() {
		t := time.Now()
		res, err := e.Run(b.Context(), req)
		backend = append(backend, time.Since(t))
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("Run(%q) = %+v, %v; want exit 0", req.Command, res, err)
		}
		d, err := BenchDockerRun(b.Context(), e.cli.DaemonHost(), testImage)
		if err != nil {
			b.Fatalf("BenchDockerRun(%q) = %v", testImage, err)
		}
		baseline = append(baseline, d)
	}
	b.ReportMetric(medianMs(backend), "backend-ms")
	b.ReportMetric(medianMs(baseline), "docker-run-ms")
	b.ReportMetric(medianMs(backend)/medianMs(baseline), "ratio")
}

// medianMs is the median of ds in milliseconds.
func medianMs(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return float64(s[len(s)/2]) / float64(time.Millisecond)
}

// BenchmarkRunOutput200MiB measures a call that writes 200 MiB to stdout
// through the attach stream into a live writer.
func BenchmarkRunOutput200MiB(b *testing.B) {
	const total = 200 << 20
	e := newTestExecutor(b)
	req := &sandbox.Request{
		Command: fmt.Sprintf("yes abcdefghijklmno | head -c %d", total),
		Session: sandbox.Session{Cwd: b.TempDir()},
		Policy:  testPolicy(b),
		Stdout:  io.Discard,
	}
	b.SetBytes(total)
	for b.Loop() {
		req.CallID = "bench-" + reap.NewInstanceID()
		res, err := e.Run(b.Context(), req)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("Run(%q) = %+v, %v; want exit 0", req.Command, res, err)
		}
		if got := res.Stdout.DroppedBytes + int64(len(res.Stdout.Text)); got != total {
			b.Fatalf("Run(%q) captured %d bytes, want %d", req.Command, got, total)
		}
	}
}

// BenchmarkDockerRun measures the baseline BenchDockerRun times: one
// `docker run --rm` of the test image through the docker CLI. Compare its
// median with BenchmarkRunTrue's from the same run.
func BenchmarkDockerRun(b *testing.B) {
	e := newTestExecutor(b)
	for b.Loop() {
		if _, err := BenchDockerRun(b.Context(), e.cli.DaemonHost(), testImage); err != nil {
			b.Fatalf("BenchDockerRun(%q) = %v", testImage, err)
		}
	}
}

// TestBenchDockerRun runs the baseline once: it must succeed on the test
// image and fail, with the CLI's complaint, on an image the engine lacks.
func TestBenchDockerRun(t *testing.T) {
	e := newTestExecutor(t)
	if _, err := exec.LookPath("docker"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but the docker CLI is missing: %v", err)
		}
		t.Skipf("the docker CLI is missing: %v", err)
	}
	d, err := BenchDockerRun(t.Context(), e.cli.DaemonHost(), testImage)
	if err != nil || d <= 0 {
		t.Fatalf("BenchDockerRun(%q) = %v, %v; want a positive duration and no error", testImage, d, err)
	}
	const missing = "dsh-sandbox-test-missing:latest"
	if _, err := BenchDockerRun(t.Context(), e.cli.DaemonHost(), missing); err == nil || !strings.Contains(err.Error(), "No such image") {
		t.Errorf("BenchDockerRun(%q) = %v, want an error with the CLI's %q", missing, err, "No such image")
	}
}
