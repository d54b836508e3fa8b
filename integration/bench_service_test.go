//go:build integration

package integration

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
)

// TestBenchService runs `bench service` against a real serve: every
// series measures its calls, the sequential one takes containers its
// predecessors prepared, and the CPU time per call is read from the
// service's /proc entry. Without a service it fails naming --server.
func TestBenchService(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	r := run(t, nil, append([]string{"bench", "service", "--n", "2"}, e.flags("")...)...)
	if r.code != 125 || !strings.Contains(r.stderr, "--server") {
		t.Errorf("bench service without a service = %d %q; want 125 naming --server", r.code, r.stderr)
	}

	sv := startServe(t, e)
	args := append([]string{"bench", "service", "--n", "4", "--clients", "2", "--pause", "50ms",
		"--server-pid", strconv.Itoa(sv.cmd.Process.Pid), "--json"}, e.flags("")...)
	r = run(t, nil, args...)
	if r.code != 0 {
		t.Fatalf("bench service = %d %q %q", r.code, r.stdout, r.stderr)
	}
	var rep struct {
		Rows []struct {
			Name         string  `json:"name"`
			N            int     `json:"n"`
			P50Ms        float64 `json:"p50Ms"`
			PoolHits     int     `json:"poolHits"`
			PoolMisses   int     `json:"poolMisses"`
			CPUMsPerCall float64 `json:"cpuMsPerCall"`
			Error        string  `json:"error"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("bench service --json: %v\n%s", err, r.stdout)
	}
	if len(rep.Rows) != 4 {
		t.Fatalf("bench service rows = %d, want 4: %s", len(rep.Rows), r.stdout)
	}
	for _, row := range rep.Rows {
		if row.Error != "" || row.N != 4 || row.P50Ms <= 0 || row.CPUMsPerCall <= 0 || row.PoolHits+row.PoolMisses != 4 {
			t.Errorf("row %+v: want 4 calls measured, their CPU time, each a pool hit or miss, no error", row)
		}
	}
	if seq := rep.Rows[0]; seq.PoolHits == 0 {
		t.Errorf("sequential calls of one session: %+v; want containers from the pool", seq)
	}
	// Their session directories are mounted at Bind: a new session's
	// first call takes a container prepared for the workspace.
	if fresh := rep.Rows[2]; fresh.PoolHits == 0 {
		t.Errorf("first calls of new sessions: %+v; want containers prepared for their workspace", fresh)
	}
	sv.stop(t)
}
