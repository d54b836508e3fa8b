package api

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// metrics are the service's Prometheus collectors, registered on a
// registry of their own (never the global one).
type metrics struct {
	reg        *prometheus.Registry
	executions *prometheus.CounterVec
	latency    *prometheus.HistogramVec
	queueWait  prometheus.Histogram
	requests   *prometheus.CounterVec
	egress     *prometheus.CounterVec
}

func newMetrics(l *limiter, leaked func() float64, extra []prometheus.Collector) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		executions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dsh_sandbox_executions_total",
			Help: "Executions by backend and outcome (ok, exit_nonzero, signal, timeout, aborted, error).",
		}, []string{"backend", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dsh_sandbox_execution_duration_seconds",
			Help:    "Wall time of an execution from admission to teardown, by backend.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 16),
		}, []string{"backend"}),
		queueWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dsh_sandbox_queue_wait_seconds",
			Help:    "Time a foreground execution waited for a slot.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dsh_sandbox_http_requests_total",
			Help: "HTTP requests by route and status code.",
		}, []string{"route", "code"}),
		egress: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dsh_sandbox_egress_connections_total",
			Help: "Connections of calls of network allowlist by verdict (allowed, denied, failed).",
		}, []string{"verdict"}),
	}
	// The runtime's and the process's own series (go_*, process_*), as
	// every Go service exposes them: memory, goroutines, open files, CPU.
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(m.executions, m.latency, m.queueWait, m.requests, m.egress,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dsh_sandbox_in_flight",
			Help: "Executions (foreground calls and background jobs) holding a slot now.",
		}, func() float64 { return float64(l.running.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dsh_sandbox_queue_depth",
			Help: "Executions (foreground calls and background jobs) waiting for a slot.",
		}, func() float64 { return float64(l.queued.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "dsh_sandbox_leaked_objects",
			Help: "Objects (containers, bundles, mounts, cgroups) the reaper removed from dead instances.",
		}, leaked),
	)
	m.reg.MustRegister(extra...)
	return m
}

// observe records one finished execution.
func (m *metrics) observe(backend string, d time.Duration, res *sandbox.Result, err error) {
	m.executions.WithLabelValues(backend, outcome(res, err)).Inc()
	m.latency.WithLabelValues(backend).Observe(d.Seconds())
	if res != nil {
		for _, c := range res.Egress {
			m.egress.WithLabelValues(c.Verdict).Inc()
		}
	}
}

func outcome(res *sandbox.Result, err error) string {
	switch {
	case err != nil || res == nil:
		return "error"
	case res.TimedOut:
		return "timeout"
	case res.Aborted:
		return "aborted"
	case res.Signal != "":
		return "signal"
	case res.ExitCode != nil && *res.ExitCode == 0:
		return "ok"
	default:
		return "exit_nonzero"
	}
}
