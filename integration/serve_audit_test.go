//go:build integration

package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
)

// auditCalls is how many audited calls TestServeAuditSurvivesKill runs
// (DSH_SANDBOX_AUDIT_CALLS, default 200; the figure is 1000).
func auditCalls(t *testing.T) int {
	if v := os.Getenv("DSH_SANDBOX_AUDIT_CALLS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 20 {
			t.Fatalf("DSH_SANDBOX_AUDIT_CALLS=%q: want a number ≥ 20", v)
		}
		return n
	}
	return 200
}

// TestServeAuditSurvivesKill: a second serve on the data directory is
// refused naming the lock; serve killed with SIGKILL amid audited calls
// leaves a log that the next serve reopens (cutting a torn record) and
// `audit verify` accepts with the operator key and the checkpoint;
// dropping the last record, or forging the tail with a recomputed
// chain, then fails verification.
func TestServeAuditSurvivesKill(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	keyFile := filepath.Join(t.TempDir(), "audit.key") // outside the data dir
	if err := os.WriteFile(keyFile, []byte("integration-audit-key-0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sv := startServe(t, e, "--max-concurrent", "4", "--audit-key", keyFile)

	// One serve per data directory.
	second := run(t, nil, append(append([]string{"serve"}, e.flags("")...), "--listen", "unix://"+filepath.Join(t.TempDir(), "second.sock"))...)
	lockFile := filepath.Join(e.data, "serve.lock")
	if second.code == 0 || !strings.Contains(second.stderr, lockFile) || !strings.Contains(second.stderr, fmt.Sprintf("pid %d", sv.cmd.Process.Pid)) {
		t.Errorf("second serve on the data dir = %d %q; want non-zero naming %s and pid %d", second.code, second.stderr, lockFile, sv.cmd.Process.Pid)
	}

	total := auditCalls(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done, next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for next.Add(1) <= int64(total) {
				if _, err := sv.cl.Run(ctx, types.RunRequest{Session: e.header("audit"), Policy: "workspace-write", Command: "echo ok"}); err != nil {
					return // the kill
				}
				done.Add(1)
			}
		})
	}
	start := time.Now()
	for done.Load() < int64(total/2) {
		if time.Since(start) > 10*time.Minute {
			t.Fatalf("%d of %d calls in 10 minutes", done.Load(), total)
		}
		time.Sleep(5 * time.Millisecond)
	}
	sv.cmd.Process.Kill()
	<-sv.done
	cancel()
	wg.Wait()
	killedAt := done.Load()
	t.Logf("killed serve after %d of %d calls answered (%.1f calls/s)", killedAt, total, float64(killedAt)/time.Since(start).Seconds())

	// Before any restart the log verifies up to its last whole record.
	verify := func(args ...string) result {
		return run(t, nil, append([]string{"audit", "verify", "--key", keyFile}, args...)...)
	}
	if r := verify(sv.audit); r.code != 0 || !strings.Contains(r.stdout, "ok: ") {
		t.Fatalf("audit verify after SIGKILL = %d %q %q", r.code, r.stdout, r.stderr)
	} else {
		t.Logf("after SIGKILL: %s", strings.TrimSpace(r.stdout))
	}
	sv2 := startServe(t, e, "--audit-key", keyFile)
	if !strings.Contains(sv2.logs(), "audit log opened") {
		t.Errorf("restarted serve did not log the audit log it opened: %s", sv2.logs())
	}
	if _, err := sv2.cl.Run(context.Background(), types.RunRequest{Session: e.header("audit"), Policy: "workspace-write", Command: "true"}); err != nil {
		t.Fatalf("Run on the restarted service = %v", err)
	}
	sv2.stop(t)
	r := verify(sv.audit)
	n := 0
	fmt.Sscanf(r.stdout, "ok: %d records", &n)
	if r.code != 0 || n < int(killedAt)+1 || !strings.Contains(r.stdout, "matches ("+strconv.Itoa(n)+" records)") || !strings.Contains(r.stdout, fmt.Sprintf("macs: %d records checked", n)) {
		t.Fatalf("audit verify after the restart = %d %q %q; want ≥ %d records, all checked", r.code, r.stdout, r.stderr, killedAt+1)
	}

	data, err := os.ReadFile(sv.audit)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines = lines[:len(lines)-1]
	cp, _ := os.ReadFile(sv.audit + ".checkpoint")
	tamper := func(name string, log []byte) string {
		p := filepath.Join(t.TempDir(), name)
		os.WriteFile(p, log, 0o600)
		os.WriteFile(p+".checkpoint", cp, 0o600)
		return p
	}
	// The last record dropped.
	if r := verify(tamper("dropped", bytes.Join(lines[:len(lines)-1], nil))); r.code != 1 || !strings.Contains(r.stderr, "records were cut off its end") {
		t.Errorf("audit verify with the last record dropped = %d %q %q", r.code, r.stdout, r.stderr)
	}
	// The tail forged: the second-last record edited, the last one re-linked.
	last, prev := lines[len(lines)-1], lines[len(lines)-2]
	forgedPrev := bytes.Replace(prev, []byte(`"stdoutBytes":3`), []byte(`"stdoutBytes":4`), 1)
	if bytes.Equal(forgedPrev, prev) {
		t.Fatalf("record to forge has no stdoutBytes 3: %s", prev)
	}
	forgedLast := bytes.Replace(last, []byte(hash(prev)), []byte(hash(forgedPrev)), 1)
	forged := append(bytes.Join(lines[:len(lines)-2], nil), append(forgedPrev, forgedLast...)...)
	if r := verify(tamper("forged", forged)); r.code != 1 || !strings.Contains(r.stderr, "MAC does not match") {
		t.Errorf("audit verify of a forged tail = %d %q %q", r.code, r.stdout, r.stderr)
	}
}

func hash(line []byte) string {
	sum := sha256.Sum256(bytes.TrimSuffix(line, []byte("\n")))
	return hex.EncodeToString(sum[:])
}
