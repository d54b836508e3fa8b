package local

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// TestAllowlistRefused: the local backend has no network to confine, so
// a policy of network allowlist runs nothing and says why.
func TestAllowlistRefused(t *testing.T) {
	e, err := New(Options{Service: driver.Service{StateDir: t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	p := localPolicy(t)
	p.Network, p.NetworkAllow = policy.NetworkAllowlist, []string{"example.com"}
	_, err = e.Run(context.Background(), &sandbox.Request{Command: "touch ran", Policy: p, Session: sandbox.Session{Cwd: t.TempDir()}})
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "policy.network") {
		t.Errorf("Run(allowlist) = %v, want an invalid-argument error naming policy.network", err)
	}
}
