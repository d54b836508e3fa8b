package sandboxtest

import (
	"context"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// BoundCredential is the credential of the backends' credential tests:
// "bound", for fixtures.BoundHostName:443, read from the service's
// fixtures.BoundSecretEnv (give the executor fixtures.BoundGetenv),
// placeholder in BOUND_TOKEN, bh's CA as the upstream CA.
func BoundCredential(t testing.TB, bh *fixtures.BoundHost) sandbox.Credential {
	return sandbox.Credential{Name: "bound", Host: fixtures.BoundHostName, Port: 443, Header: "Authorization", Format: "Bearer {}",
		Variable: "BOUND_TOKEN", ValueEnv: fixtures.BoundSecretEnv, UpstreamCAFile: bh.CAFile(t)}
}

// RunBoundProbes runs fixtures.BoundProbes on e under p (whose
// credential is BoundCredential's) and checks what the call printed and
// recorded (fixtures.BoundHost.Check).
func RunBoundProbes(t testing.TB, e sandbox.Executor, bh *fixtures.BoundHost, p sandbox.Policy) *sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := e.Run(ctx, &sandbox.Request{Command: fixtures.ProbeShell + fixtures.BoundProbes, Session: sandbox.Session{ID: "s", Cwd: t.TempDir()}, Policy: p})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	bh.Check(t, res.Stdout.Text, res.Stderr.Text, res.Egress)
	return res
}
