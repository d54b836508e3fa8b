package api_test

import (
	"context"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
)

// BenchmarkServicePath is the service's own per-call cost: decoding,
// snapshot, admission, audit, metrics, JSON answer and the Unix-socket
// round trip, around an executor that does nothing. The
// executor's own cost (a container) comes on top; integration's
// BenchmarkServiceOverhead measures both with the real backend.
func BenchmarkServicePath(b *testing.B) {
	f := newFixture(b, &fakeExec{}, nil)
	ctx := context.Background()
	req := types.RunRequest{Session: header("s1", f.work), Policy: policy.WorkspaceWrite, Command: "true", Env: []string{"A=1"}}
	for b.Loop() {
		if _, err := f.cl.Run(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
