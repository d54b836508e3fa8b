//go:build docker

package docker

import (
	"fmt"
	"io"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// BenchmarkRunTrue measures one call of `true`: create, attach, start,
// wait, removal.
func BenchmarkRunTrue(b *testing.B) {
	e := newTestExecutor(b)
	req := &sandbox.Request{Command: "true", Session: sandbox.Session{Cwd: b.TempDir()}, Policy: testPolicy(b)}
	for b.Loop() {
		res, err := e.Run(b.Context(), req)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("Run(%q) = %+v, %v; want exit 0", req.Command, res, err)
		}
	}
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
		req.CallID = "bench-" + newInstanceID()
		res, err := e.Run(b.Context(), req)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 {
			b.Fatalf("Run(%q) = %+v, %v; want exit 0", req.Command, res, err)
		}
		if got := res.Stdout.DroppedBytes + int64(len(res.Stdout.Text)); got != total {
			b.Fatalf("Run(%q) captured %d bytes, want %d", req.Command, got, total)
		}
	}
}
