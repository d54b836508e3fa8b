package main

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/pool"
)

// poolFlags are the warm pool's settings of serve and mcp.
func poolFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "pool", Value: true, Usage: "keep a container prepared for each active session's next call (oci with runc or crun; --pool=false: every call starts its own)"},
		&cli.IntFlag{Name: "pool-per-key", Value: pool.DefaultPerKey, Usage: "prepared containers kept per session and policy"},
		&cli.IntFlag{Name: "pool-max", Value: pool.DefaultMax, Usage: "prepared containers of all sessions together"},
		&cli.DurationFlag{Name: "pool-ttl", Value: pool.DefaultTTL, Usage: "how long a prepared container may wait unused before it is destroyed"},
		&cli.DurationFlag{Name: "pool-idle", Value: pool.DefaultIdle, Usage: "how long after its last call a session keeps getting containers prepared"},
		&cli.DurationFlag{Name: "pool-refill-delay", Value: pool.DefaultRefillDelay, Usage: "how long a call runs alone before its session's next container is prepared (sooner when it ends sooner; 0: at once)"},
	}
}

// poolOptions reads poolFlags: nil when --pool=false, a usage error
// naming the flag for a value out of range.
func poolOptions(c *cli.Context, obs pool.Observer) (*pool.Options, error) {
	if !c.Bool("pool") {
		return nil, nil
	}
	for _, f := range []string{"pool-per-key", "pool-max"} {
		if c.Int(f) < 1 {
			return nil, usageError("--%s: want at least 1, got %d", f, c.Int(f))
		}
	}
	for _, f := range []string{"pool-ttl", "pool-idle"} {
		if c.Duration(f) <= 0 {
			return nil, usageError("--%s: want a positive duration, got %s", f, c.Duration(f))
		}
	}
	delay := c.Duration("pool-refill-delay")
	if delay < 0 {
		return nil, usageError("--pool-refill-delay: want a duration of 0 or more, got %s", delay)
	}
	if delay == 0 {
		delay = -1 // pool.Options: at once
	}
	if c.Int("pool-per-key") > c.Int("pool-max") {
		return nil, usageError("--pool-per-key %d exceeds --pool-max %d", c.Int("pool-per-key"), c.Int("pool-max"))
	}
	return &pool.Options{
		PerKey:      c.Int("pool-per-key"),
		Max:         c.Int("pool-max"),
		TTL:         c.Duration("pool-ttl"),
		Idle:        c.Duration("pool-idle"),
		RefillDelay: delay,
		Observer:    obs,
	}, nil
}

// poolMetrics are the warm pool's Prometheus collectors (dsh_sandbox_pool_*),
// fed as its Observer.
type poolMetrics struct {
	hits, misses prometheus.Counter
	prepared     *prometheus.CounterVec
	destroyed    *prometheus.CounterVec
	handout      prometheus.Histogram
	ready        prometheus.GaugeFunc
	preparing    prometheus.GaugeFunc

	// size, once set, reads the pools' sizes for the gauges.
	size atomic.Pointer[func() pool.Size]
}

func newPoolMetrics() *poolMetrics {
	m := &poolMetrics{
		hits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dsh_sandbox_pool_hits_total",
			Help: "Calls that found a prepared container in the warm pool.",
		}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dsh_sandbox_pool_misses_total",
			Help: "Calls that found none and prepared their own (the cold path).",
		}),
		prepared: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dsh_sandbox_pool_prepared_total",
			Help: "Containers the warm pool prepared, by outcome (ok, error).",
		}, []string{"outcome"}),
		destroyed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dsh_sandbox_pool_destroyed_total",
			Help: "Containers the warm pool tore down, by reason (used, expired, dead, closed, evicted).",
		}, []string{"reason"}),
		handout: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dsh_sandbox_pool_handout_seconds",
			Help:    "Time a call spent asking the warm pool for a container.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 10),
		}),
	}
	m.ready = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "dsh_sandbox_pool_ready",
		Help: "Containers the warm pools hold prepared, ready for a call.",
	}, func() float64 { return float64(m.sizeNow().Ready) })
	m.preparing = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "dsh_sandbox_pool_preparing",
		Help: "Containers the warm pools are preparing.",
	}, func() float64 { return float64(m.sizeNow().Preparing) })
	return m
}

func (m *poolMetrics) sizeNow() pool.Size {
	if f := m.size.Load(); f != nil {
		return (*f)()
	}
	return pool.Size{}
}

func (m *poolMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.hits, m.misses, m.prepared, m.destroyed, m.handout, m.ready, m.preparing}
}

func (m *poolMetrics) Took(_ string, hit bool, d time.Duration) {
	if hit {
		m.hits.Inc()
	} else {
		m.misses.Inc()
	}
	m.handout.Observe(d.Seconds())
}

func (m *poolMetrics) Prepared(_ string, _ time.Duration, err error) {
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	m.prepared.WithLabelValues(outcome).Inc()
}

func (m *poolMetrics) Destroyed(_ string, why pool.Reason, _ error) {
	m.destroyed.WithLabelValues(string(why)).Inc()
}
