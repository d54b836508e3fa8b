package jsonl

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// BenchmarkLocate measures the pure path computation behind Locate
// (target: at most 1µs and one allocation).
func BenchmarkLocate(b *testing.B) {
	s, err := New(Options{Root: filepath.Join(b.TempDir(), "sessions")})
	if err != nil {
		b.Fatal(err)
	}
	h := session.Header{ID: "session-7f3c2a10-4b5d-4e6f-8a9b-0c1d2e3f4a5b", CreatedAt: 1, Cwd: "/home/dev/src/deepseek-harness/开发"}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := s.Locate(h); !ok {
			b.Fatal("Locate failed")
		}
	}
}

// BenchmarkAppendBatched appends one event per call to one session, the
// way a harness streams chunks, with the default write-behind delay, and
// includes the final Flush (target: at least 200 000 events/s, plain).
func BenchmarkAppendBatched(b *testing.B) {
	s, err := New(Options{Root: filepath.Join(b.TempDir(), "sessions")})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	h := session.Header{ID: "session-bench", CreatedAt: 1, Cwd: "/srv/app"}
	events := mkEvents(0, 1000)
	ctx := context.Background()
	b.ReportAllocs()
	start, cpu0 := time.Now(), cpuNow()
	n := 0
	for b.Loop() {
		e := events[n%len(events)]
		e.Seq = int64(n)
		if err := s.Append(ctx, h, e); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if err := s.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	reportRate(b, n, start, cpu0)
}

// BenchmarkLoad100k loads a 100 000-event log (target: at least 300 000
// events/s for the plain encoding).
func BenchmarkLoad100k(b *testing.B) {
	const total = 100_000
	for _, m := range []struct {
		name   string
		comp   Compression
		packed bool
	}{
		{"plain", CompressionNone, false},
		{"packed", CompressionNone, true},
		{"zstd", CompressionZstd, true},
	} {
		b.Run(m.name, func(b *testing.B) {
			s, err := New(Options{Root: filepath.Join(b.TempDir(), "sessions"), Compression: m.comp, Packed: m.packed, BatchDelay: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			h := session.Header{ID: "session-load", CreatedAt: 1, Cwd: "/srv/app"}
			ctx := context.Background()
			events := mkEvents(0, total)
			for i := 0; i < total; i += 1000 { // 100 batches
				if err := s.Append(ctx, h, events[i:i+1000]...); err != nil {
					b.Fatal(err)
				}
				if err := s.Flush(ctx); err != nil {
					b.Fatal(err)
				}
			}
			loc, _ := s.Locate(h)
			b.ReportAllocs()
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuNow()
			loads := 0
			for b.Loop() {
				log, err := ReadFile(loc.Path)
				if err != nil || len(log.Events) != total {
					b.Fatalf("ReadFile() = %d events, %v", len(log.Events), err)
				}
				loads++
			}
			reportRate(b, loads*total, start, cpu0)
		})
	}
}

func cpuNow() time.Duration {
	d, _ := processCPU()
	return d
}

// reportRate reports events per wall-clock second and, where the OS tells,
// per second of process CPU time (all threads, GC and timers included).
func reportRate(b *testing.B, events int, start time.Time, cpu0 time.Duration) {
	b.ReportMetric(float64(events)/time.Since(start).Seconds(), "events/s")
	if cpu, ok := processCPU(); ok && cpu > cpu0 {
		b.ReportMetric(float64(events)/(cpu-cpu0).Seconds(), "events/cpu-s")
	}
}
