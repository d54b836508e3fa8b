package sqlite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
)

// benchEvents returns n events of about the size of a dsh assistant/chunk
// or tool/result event (~250 bytes of data), numbered from first.
func benchEvents(first int64, n int) []persistence.Event {
	text := strings.Repeat("lorem ipsum ", 12)
	events := make([]persistence.Event, n)
	for i := range events {
		seq := first + int64(i)
		events[i] = persistence.Event{
			Type:      "assistant/chunk",
			Seq:       seq,
			Time:      1785403668200 + seq,
			Data:      json.RawMessage(fmt.Sprintf(`{"turn":1,"step":1,"chunk":{"type":"text-delta","index":0,"text":%q}}`, text)),
			SurfaceOp: json.RawMessage(`"append"`),
		}
	}
	return events
}

// BenchmarkAppend measures one durable Append of a batch of events to a
// growing session; events/s is the throughput.
func BenchmarkAppend(b *testing.B) {
	for _, batch := range []int{1, 32, 256} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			s := newStore(b)
			ctx := context.Background()
			h := testHeader("bench-append")
			next := int64(0)
			for b.Loop() {
				b.StopTimer()
				events := benchEvents(next, batch)
				b.StartTimer()
				if err := s.Append(ctx, h, events...); err != nil {
					b.Fatalf("Append() = %v", err)
				}
				next += int64(batch)
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// BenchmarkLoad measures loading a whole session; events/s is the
// throughput.
func BenchmarkLoad(b *testing.B) {
	for _, n := range []int{100, 2000} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			s := newStore(b)
			ctx := context.Background()
			h := testHeader("bench-load")
			if err := s.Append(ctx, h, benchEvents(0, n)...); err != nil {
				b.Fatalf("Append() = %v", err)
			}
			for b.Loop() {
				log, err := s.Load(ctx, h.ID)
				if err != nil {
					b.Fatalf("Load() = %v", err)
				}
				if len(log.Events) != n {
					b.Fatalf("Load() returned %d events, want %d", len(log.Events), n)
				}
			}
			b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
