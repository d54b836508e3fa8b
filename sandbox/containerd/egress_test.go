package containerd

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/dsh-sandbox/dsh-sandbox/egress"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestEgressAllowlist runs one call of network allowlist in the busybox
// test image that tries every way out (plain HTTP through the proxy the
// call's http_proxy names; nslookup asks the resolv.conf the call gets)
// and checks which worked,
// the record, and that the proxy dialed nothing it refused.
func TestEgressAllowlist(t *testing.T) {
	addr := testAddress(t)
	inet := fixtures.NewInternet(t)
	e, err := New(t.Context(), Options{
		Address: addr, Namespace: testNamespace, StateDir: testStateDir(t),
		Logger:  zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.InfoLevel),
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
	importTestImage(t, e)
	p := testPolicy(t)
	p.Network, p.NetworkAllow, p.NetworkDeny = policy.NetworkAllowlist, []string{"web.test", "private.test"}, []string{"denied.test"}
	if p, err = policy.Normalize(p); err != nil {
		t.Fatal(err)
	}
	// The image's busybox wget crashes (a static glibc build), so
	// get() is a minimal proxy-aware client in bash: a plain HTTP request
	// to the proxy named by $http_proxy. It fails unless the answer is 200.
	script := `
get() {
	p=${http_proxy#http://}; exec 3<>/dev/tcp/${p%:*}/${p##*:} || return 1
	printf 'GET %s HTTP/1.0\r\nHost: x\r\n\r\n' "$1" >&3
	IFS= read -r status <&3; case $status in *" 200 "*) ;; *) return 1;; esac
	while IFS= read -r l <&3 && [ "$l" != $'\r' ]; do :; done; cat <&3
}
probe http get http://web.test/
probe denied get http://denied.test/
probe ip get http://` + fixtures.WebIP + `/
probe private get http://private.test/
probe metadata get http://169.254.169.254/
probe rawtcp timeout 5 bash -c 'echo > /dev/tcp/` + fixtures.WebIP + `/80'
probe rawproxy timeout 5 bash -c 'echo > /dev/tcp/127.0.0.1/3128'
probe dnsok sh -c 'nslookup web.test | grep -q ` + fixtures.WebIP + `'
probe dnsdenied sh -c 'nslookup denied.test | grep -q ` + fixtures.DeniedIP + `'
`
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := e.Run(ctx, &sandbox.Request{Command: fixtures.ProbeShell + script, Session: sandbox.Session{ID: "s", Cwd: t.TempDir()}, Policy: p})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	fixtures.CheckProbes(t, res.Stdout.Text, res.Stderr.Text, map[string]string{
		"http": "ok:" + fixtures.WebReply, "denied": "fail", "ip": "fail", "private": "fail", "metadata": "fail",
		"rawtcp": "fail", "rawproxy": "ok:", "dnsok": "ok:", "dnsdenied": "fail",
	})
	inet.Check(t)
	verdicts := map[string]string{}
	for _, c := range res.Egress {
		verdicts[fmt.Sprintf("%s:%d", c.Host, c.Port)] = c.Verdict
	}
	for hp, w := range map[string]string{"web.test:80": egress.Allowed, "denied.test:80": egress.Denied, fixtures.WebIP + ":80": egress.Denied, "private.test:80": egress.Denied} {
		if verdicts[hp] != w {
			t.Errorf("record of %s = %q, want %q (%+v)", hp, verdicts[hp], w, res.Egress)
		}
	}
	if l := leftovers(t, e); len(l) > 0 {
		t.Errorf("left behind: %v", l)
	}
}
