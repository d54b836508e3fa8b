package egress

import (
	"slices"
	"testing"
	"time"
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
