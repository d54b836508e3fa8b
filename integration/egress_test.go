//go:build integration

package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
)

// hostAddr is an IPv4 address of this host other than loopback, which a
// call of network allowlist may reach only when its policy lists it.
func hostAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true but the host has no IPv4 address besides loopback")
	}
	t.Skip("the host has no IPv4 address besides loopback")
	return ""
}

// TestServeEgressAllowlist runs a call of a policy with network
// allowlist through the service: the listed address and port is reached
// through the HTTP proxy and the SOCKS5 server, everything else is refused, and the result, the
// audit log and the metrics record each connection.
func TestServeEgressAllowlist(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	ip := hostAddr(t)
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "upstream says hi") })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	allowed := ln.Addr().String()
	other, err := net.Listen("tcp", ip+":0") // listening, but not listed
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()

	dir := t.TempDir()
	pol := filepath.Join(dir, "egress.yaml")
	doc := "name: egress\nbackend: oci\nruntime: runc\nimage: host\n" +
		"network: {mode: allowlist, allow: [\"" + allowed + "\"]}\n"
	if err := os.WriteFile(pol, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	sv := startServe(t, e, "--policy-file", pol)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := fixtures.ProbeShell + `probe allowed curl -sSf -m 10 http://` + allowed + `/
probe port curl -sSf -m 10 http://` + other.Addr().String() + `/
probe socks curl -sSf -m 10 -x socks5h://127.0.0.1:1080 http://` + allowed + `/
probe socksport curl -sSf -m 10 -x socks5h://127.0.0.1:1080 http://` + other.Addr().String() + `/
probe metadata curl -sSf -m 10 http://169.254.169.254/latest/meta-data/
probe direct timeout 5 bash -c 'echo > /dev/tcp/` + strings.ReplaceAll(allowed, ":", "/") + `'
probe dns getent hosts denied.invalid`
	resp, err := sv.cl.Run(ctx, types.RunRequest{Session: e.header("s1"), Policy: "egress", Command: cmd})
	if err != nil {
		t.Fatal(err)
	}
	fixtures.CheckProbes(t, resp.Result.Stdout.Text, resp.Result.Stderr.Text, map[string]string{
		"allowed": "ok:upstream says hi", "port": "fail", "metadata": "fail", "direct": "fail", "dns": "fail",
		"socks": "ok:upstream says hi", "socksport": "fail",
	})
	verdicts := map[string]string{}
	counts := map[string]int{}
	for _, c := range resp.Result.Egress {
		verdicts[fmt.Sprintf("%s:%d", c.Host, c.Port)] = c.Verdict
		counts[c.Verdict]++
	}
	_, otherPort, _ := net.SplitHostPort(other.Addr().String())
	for hp, want := range map[string]string{allowed: "allowed", ip + ":" + otherPort: "denied", "169.254.169.254:80": "denied", "denied.invalid:0": "denied"} {
		if verdicts[hp] != want {
			t.Errorf("result egress %s = %q, want %q (%+v)", hp, verdicts[hp], want, resp.Result.Egress)
		}
	}
	// The model-facing text ends with a note naming the denied hosts.
	if !strings.Contains(resp.Rendered, "[network: the sandbox denied connections to ") || !strings.Contains(resp.Rendered, ip+":"+otherPort) {
		t.Errorf("rendered result %q, want it to end with a note naming %s:%s", resp.Rendered, ip, otherPort)
	}
	audit, err := os.ReadFile(sv.audit)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(audit), `"host":"169.254.169.254","port":80`) || !strings.Contains(string(audit), `"verdict":"allowed"`) {
		t.Errorf("audit log lacks the egress record:\n%s", audit)
	}
	m := sv.metrics(t)
	if counts["allowed"] != 2 || counts["denied"] < 4 {
		t.Errorf("result egress counts %v, want 2 allowed (HTTP and SOCKS5) and at least 4 denied", counts)
	}
	for verdict, n := range counts {
		if want := fmt.Sprintf("dsh_sandbox_egress_connections_total{verdict=%q} %d\n", verdict, n); !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// exec prints one line per denied host on stderr after the call.
	r := run(t, nil, append(append([]string{"exec"}, e.flags("s1")...), "--server", "unix://"+sv.sock, "--policy", "egress", "--",
		"curl -sSf -m 10 http://"+other.Addr().String()+"/")...)
	if r.code == 0 || !strings.Contains(r.stderr, "dsh-sandbox: denied connection to "+other.Addr().String()+" (") {
		t.Errorf("exec of a denied connection = %d, stderr %q; want a failure and a line naming %s", r.code, r.stderr, other.Addr())
	}
	// So does exec without the service, and a call that tries no host
	// prints no such line.
	r = run(t, nil, append(append([]string{"exec"}, e.flags("s1")...), "--policy", pol, "--",
		"curl -sSf -m 10 http://"+other.Addr().String()+"/")...)
	if r.code == 0 || !strings.Contains(r.stderr, "dsh-sandbox: denied connection to "+other.Addr().String()+" (") {
		t.Errorf("local exec of a denied connection = %d, stderr %q; want a failure and a line naming %s", r.code, r.stderr, other.Addr())
	}
	if r = run(t, nil, append(append([]string{"exec"}, e.flags("s1")...), "--policy", pol, "--", "echo quiet")...); r.code != 0 || r.stderr != "" {
		t.Errorf("local exec that tries no host = %d, stderr %q; want 0 and nothing", r.code, r.stderr)
	}
}
