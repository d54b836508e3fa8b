//go:build integration

package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
)

// TestServeEgressCredentials runs a call through the service whose
// policy binds a credential (from an operator-owned file) to localhost
// on the port of an HTTPS server of the test (its own CA is the policy's
// upstreamCA). The server receives the real value and answers with it
// 2000 times over, so that the call's stdout spills: the call sees, and
// the spill file keeps, only the placeholder; the audit log says the
// credential was used and never holds the value.
func TestServeEgressCredentials(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	const secret = "glpat-realCredentialValue-42424242"
	tlsConf, caPEM := fixtures.TLSConfig(t, "localhost")
	var mu sync.Mutex
	var got []string
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := r.Header.Get("Authorization")
		mu.Lock()
		got = append(got, a)
		mu.Unlock()
		fmt.Fprint(w, strings.Repeat(a+"\n", 2000))
	}))
	srv.TLS = tlsConf
	srv.StartTLS()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())

	dir := t.TempDir()
	token, ca := filepath.Join(dir, "token"), filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(token, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(dir, "cred.yaml")
	doc := "name: cred\nbackend: oci\nruntime: runc\nimage: host\n" +
		"network:\n  mode: allowlist\n  allow: [localhost, \"127.0.0.1\"]\n  credentials:\n" +
		"    - {name: local, host: localhost, port: " + port + ", variable: LOCAL_TOKEN, value: {file: " + token + "}, upstreamCA: " + ca + "}\n"
	if err := os.WriteFile(pol, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	sv := startServe(t, e, "--policy-file", pol)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// NO_PROXY names localhost: curl is told to use the proxy anyway.
	cmd := `curl -sS --noproxy '' -x "$HTTPS_PROXY" -H "Authorization: Bearer $LOCAL_TOKEN" https://localhost:` + port + `/ && echo "token=$LOCAL_TOKEN"`
	resp, err := sv.cl.Run(ctx, types.RunRequest{Session: e.header("s1"), Policy: "cred", Command: cmd})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Result
	mu.Lock()
	if len(got) != 1 || got[0] != "Bearer "+secret {
		t.Errorf("the bound host received %q, want the value once", got)
	}
	mu.Unlock()
	if r.ExitCode == nil || *r.ExitCode != 0 || !r.Stdout.Truncated || r.Stdout.SpillPath == "" {
		t.Fatalf("call exit %v, stdout truncated %v spill %q, want 0 and a spill file; stderr %q", r.ExitCode, r.Stdout.Truncated, r.Stdout.SpillPath, r.Stderr.Text)
	}
	spill, err := os.ReadFile(r.Stdout.SpillPath)
	if err != nil {
		t.Fatal(err)
	}
	ph := strings.TrimPrefix(strings.TrimSpace(r.Stdout.Text[strings.LastIndex(r.Stdout.Text, "token="):]), "token=")
	if !strings.HasPrefix(ph, "dsh-sandbox-placeholder-local-") {
		t.Fatalf("the call's LOCAL_TOKEN = %q, want a placeholder", ph)
	}
	if strings.Contains(string(spill)+r.Stdout.Text+r.Stderr.Text, secret) || strings.Count(string(spill), "Bearer "+ph) != 2000 {
		t.Errorf("the spill file (%d bytes) holds the value, or not the placeholder 2000 times", len(spill))
	}
	audit, err := os.ReadFile(sv.audit)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(audit), secret) {
		t.Errorf("the audit log holds the value")
	}
	if !strings.Contains(string(audit), `credential \"local\" added to 1 of 1 requests`) {
		t.Errorf("the audit log does not say the credential was used once:\n%s", audit)
	}
}
