package kubernetes

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestNetworkIsolation: a call's pod reaches neither another call's pod,
// the node's addresses nor the API server's service address; a listener
// on its own address answers it (the legitimate variant, which shows the
// probe works).
func TestNetworkIsolation(t *testing.T) {
	e := newTestExecutor(t, 0)
	p := testPolicy(t)
	p.Network = sandbox.NetworkNone

	// A listener on the node, on every address, that the host itself
	// reaches.
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintln(c, "reached")
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	var targets []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			targets = append(targets, fmt.Sprintf("%s %d", ipn.IP, port))
		}
	}
	if len(targets) == 0 {
		t.Fatal("the node has no non-loopback IPv4 address to probe")
	}
	targets = append(targets, "10.96.0.1 443")

	// Call A serves on its pod's address and says which.
	pr, pw := io.Pipe()
	reqA := request(t, p, `busybox hostname -i; exec busybox nc -ll -p 8080 -e /bin/echo reached`)
	reqA.TimeoutMs = 60_000
	reqA.Stdout = pw
	aDone := make(chan error, 1)
	actx, stopA := context.WithCancel(t.Context())
	defer func() {
		stopA()
		<-aDone
	}()
	go func() {
		_, err := e.Run(actx, reqA)
		pw.Close()
		aDone <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("call A's address: %v", err)
	}
	go io.Copy(io.Discard, pr)
	podIP := strings.Fields(line)[0]
	targets = append(targets, podIP+" 8080")

	var script strings.Builder
	script.WriteString(`busybox nc -ll -p 9090 -e /bin/echo reached & sleep 1; echo "self $(busybox nc -w 2 $(busybox hostname -i) 9090 </dev/null)"; `)
	for _, tg := range targets {
		fmt.Fprintf(&script, `echo "%s $(busybox nc -w 2 %s </dev/null 2>&1 | head -1)"; `, tg, tg)
	}
	res := run(t, e, request(t, p, script.String()))
	lines := strings.Split(strings.TrimSpace(res.Stdout.Text), "\n")
	if len(lines) != len(targets)+1 || lines[0] != "self reached" {
		t.Fatalf("probe output %q (stderr %q): want its own listener reached first", res.Stdout.Text, res.Stderr.Text)
	}
	for i, tg := range targets {
		if strings.Contains(lines[i+1], "reached") {
			t.Errorf("a call reached %s: %q", tg, lines[i+1])
		}
	}
	// The host reaches its own listener: the node's refusal above is
	// the pod's network, not a dead listener.
	c, err := net.DialTimeout("tcp4", strings.Replace(targets[0], " ", ":", 1), 2*time.Second)
	if err != nil {
		t.Fatalf("the host cannot reach its own listener: %v", err)
	}
	c.Close()
	// Call A serves until it is cancelled (deferred above).
	select {
	case err := <-aDone:
		t.Fatalf("call A ended early: %v", err)
	default:
	}
}
