package egress

import (
	"slices"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// BenchmarkStartClose times the egress network of one call alone: the
// namespace, its loopback, four listening sockets and their servers,
// then Close. Its median is what network allowlist adds to a call
// before the runtime joins the namespace.
func BenchmarkStartClose(b *testing.B) {
	requireRoot(b)
	ds := make([]time.Duration, 0, b.N)
	for range b.N {
		t := time.Now()
		c, err := Start(Options{Allow: []string{"example.com"}})
		if err != nil {
			b.Fatal(err)
		}
		c.Close()
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/float64(time.Microsecond), "median-µs")
}

// BenchmarkBind times what credentials add to a call before its network
// starts, against a call without: one credential read from the
// service's environment, its placeholder, the call's CA and the leaf
// for the bound host, and the call's CA bundle written and removed.
func BenchmarkBind(b *testing.B) {
	dir := b.TempDir()
	with := sandbox.Policy{Credentials: []sandbox.Credential{{Name: "gh", Host: "api.github.com", Port: 443, Header: "Authorization", Format: "Bearer {}", ValueEnv: "GH"}}}
	getenv := func(string) (string, bool) { return "a-token-value-0123456789", true }
	ds := make([]time.Duration, 0, b.N)
	for range b.N {
		t := time.Now()
		bd, err := Bind(with, getenv, dir, "call")
		if err != nil || bd == nil {
			b.Fatal(err)
		}
		if err := bd.Remove(); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/float64(time.Microsecond), "median-µs")
	b.ReportMetric(float64(ds[len(ds)*95/100])/float64(time.Microsecond), "p95-µs")
}
