package containerd

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/egress"
	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// TestEgressAllowlist runs one call of network allowlist in the busybox
// test image plus curl and getent that tries every way out
// (fixtures.EgressProbes: the HTTP proxy, the SOCKS5 server, a Go program
// that honours the proxy variables, direct sockets, DNS) and checks which
// worked, the record, and that the proxy dialed nothing it refused.
func TestEgressAllowlist(t *testing.T) {
	addr := testAddress(t)
	inet := fixtures.NewInternet(t)
	e, err := New(t.Context(), Options{
		Address: addr, Namespace: testNamespace, Service: driver.Service{StateDir: testStateDir(t), Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))},
		Network: egress.Network{LookupNetIP: inet.LookupNetIP, DialContext: inet.DialContext},
	})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	defer func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	}()
	if err := e.ImportRootfs(t.Context(), egressRootfsTar(t), fixtures.EgressImage, testImageEnv); err != nil {
		t.Fatalf("ImportRootfs(%q) = %v", fixtures.EgressImage, err)
	}
	p := testPolicy(t)
	p.Image = fixtures.EgressImage
	p.Network, p.NetworkAllow, p.NetworkDeny = policy.NetworkAllowlist, []string{"web.test", "tls.test:443", "private.test"}, []string{"denied.test"}
	if p, err = policy.Normalize(p); err != nil {
		t.Fatal(err)
	}
	cwd := t.TempDir()
	fixtures.ProxyClient(t, cwd, inet.CACertPEM)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := e.Run(ctx, &sandbox.Request{Command: fixtures.ProbeShell + fixtures.EgressProbes, Session: sandbox.Session{ID: "s", Cwd: cwd}, Policy: p})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	fixtures.CheckProbes(t, res.Stdout.Text, res.Stderr.Text, fixtures.EgressProbesWant)
	inet.Check(t)
	fixtures.CheckEgressRecord(t, res.Egress)
	if l := leftovers(t, e); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}

// egressRootfsTar is the root filesystem of fixtures.EgressImage.
func egressRootfsTar(t *testing.T) *bytes.Buffer {
	t.Helper()
	var tar bytes.Buffer
	if err := images.BusyboxWith(&tar, fixtures.EgressTools...); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but the egress test image cannot be built: %v", err)
		}
		t.Skipf("cannot build the egress test image (install busybox-static, bash and curl): %v", err)
	}
	return &tar
}

// TestEgressCredentials runs fixtures.BoundProbes in the busybox test
// image plus curl under a policy that binds a credential to
// fixtures.BoundHostName: the host gets the secret, the call only its
// placeholder, and the call's CA bundle is bound where curl finds it.
func TestEgressCredentials(t *testing.T) {
	addr := testAddress(t)
	bh := fixtures.NewBoundHost(t)
	e, err := New(t.Context(), Options{
		Address: addr, Namespace: testNamespace, Service: driver.Service{StateDir: testStateDir(t), Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})), Getenv: fixtures.BoundGetenv},
		Network: egress.Network{LookupNetIP: bh.LookupNetIP, DialContext: bh.DialContext},
	})
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	defer func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	}()
	if err := e.ImportRootfs(t.Context(), egressRootfsTar(t), fixtures.EgressImage, testImageEnv); err != nil {
		t.Fatalf("ImportRootfs(%q) = %v", fixtures.EgressImage, err)
	}
	p := testPolicy(t)
	p.Image = fixtures.EgressImage
	p.Network, p.NetworkAllow = policy.NetworkAllowlist, []string{fixtures.BoundHostName}
	p.Credentials = []sandbox.Credential{{Name: "bound", Host: fixtures.BoundHostName, Port: 443, Header: "Authorization", Format: "Bearer {}",
		Variable: "BOUND_TOKEN", ValueEnv: fixtures.BoundSecretEnv, UpstreamCAFile: bh.CAFile(t)}}
	if p, err = policy.Normalize(p); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := e.Run(ctx, &sandbox.Request{Command: fixtures.ProbeShell + fixtures.BoundProbes, Session: sandbox.Session{ID: "s", Cwd: t.TempDir()}, Policy: p})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	bh.Check(t, res.Stdout.Text, res.Stderr.Text, res.Egress)
	if l := leftovers(t, e); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}
