package egress

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"
)

// requireRoot skips a test that creates network namespaces unless it runs
// as root; under CI=true it fails instead.
func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but the egress namespace tests need root (uid %d)", os.Geteuid())
	}
	t.Skipf("the egress namespace tests need root (running as uid %d)", os.Geteuid())
}

// inNamespace runs f on a thread of its own that joined the network
// namespace at path; the thread ends with f.
func inNamespace(t *testing.T, path string, f func() error) error {
	t.Helper()
	return joinNamespace(path, f)
}

// joinNamespace is inNamespace for code without a testing.T (the
// memory test's attacker process).
func joinNamespace(path string, f func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ns, err := os.Open(path)
		if err != nil {
			done <- err
			return
		}
		defer ns.Close()
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- err
			return
		}
		done <- f()
	}()
	return <-done
}

// echoUpstream is a TCP server that echoes lines and counts the
// connections it saw end.
type echoUpstream struct {
	ln     net.Listener
	mu     sync.Mutex
	closed int
}

func newEchoUpstream(t *testing.T) *echoUpstream {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &echoUpstream{ln: ln}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				_, _ = io.Copy(c, c)
				c.Close()
				u.mu.Lock()
				u.closed++
				u.mu.Unlock()
			}()
		}
	}()
	return u
}

func (u *echoUpstream) closedConns() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.closed
}

// testNetwork resolves echo.test to a public-looking address and dials
// it to the upstream; any other dial fails.
func testNetwork(upstream string) Network {
	return Network{
		LookupNetIP: func(_ context.Context, host string) ([]netip.Addr, error) {
			switch host {
			case "echo.test":
				return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
			case "inside.test":
				return []netip.Addr{netip.MustParseAddr("10.9.8.7")}, nil
			}
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr != "93.184.216.34:7" {
				return nil, fmt.Errorf("test network: no route to %s", addr)
			}
			var d net.Dialer
			return d.DialContext(ctx, network, upstream)
		},
	}
}

// connect opens a CONNECT tunnel to target through the call's proxy,
// from inside its namespace.
func connect(t *testing.T, c *Gateway, target string) (net.Conn, *bufio.Reader, int) {
	t.Helper()
	var conn net.Conn
	if err := inNamespace(t, c.NamespacePath(), func() (err error) {
		conn, err = net.Dial("tcp", ProxyAddr)
		return err
	}); err != nil {
		t.Fatalf("dialing the proxy in the namespace: %v", err)
	}
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	return conn, br, resp.StatusCode
}

// TestCallClosesHeldConnections holds tunnels open past Close and checks
// that Close ends both sides, records the bytes and leaves no goroutine.
func TestCallClosesHeldConnections(t *testing.T) {
	requireRoot(t)
	up := newEchoUpstream(t)
	before := runtime.NumGoroutine()
	c, err := Start(Options{Allow: []string{"echo.test:7"}, Network: testNetwork(up.ln.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	const held = 5
	var conns []net.Conn
	for i := range held {
		conn, br, code := connect(t, c, "echo.test:7")
		if code != http.StatusOK {
			t.Fatalf("CONNECT echo.test:7 = %d, want 200", code)
		}
		fmt.Fprintf(conn, "ping %d\n", i)
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("ping %d\n", i) {
			t.Fatalf("echo through the tunnel = %q, %v", line, err)
		}
		conns = append(conns, conn)
	}
	if _, _, code := connect(t, c, "inside.test:7"); code == http.StatusOK {
		t.Errorf("CONNECT to a name resolving to a private address = 200, want a refusal")
	}
	if _, _, code := connect(t, c, "93.184.216.34:7"); code == http.StatusOK {
		t.Errorf("CONNECT to an unlisted IP = 200, want a refusal")
	}
	recs := c.Close()
	for _, conn := range conns {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := conn.Read(make([]byte, 1)); err == nil {
			t.Errorf("a held client connection read %d bytes after Close, want EOF", n)
		}
		conn.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for up.closedConns() < held && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := up.closedConns(); n != held {
		t.Errorf("upstream saw %d connections end after Close, want %d", n, held)
	}
	var allowed, denied int
	for _, r := range recs {
		switch r.Verdict {
		case Allowed:
			allowed++
			if r.BytesUp != 7 || r.BytesDown != 7 || r.Address != "93.184.216.34:7" {
				t.Errorf("record %+v: want 7 bytes each way to 93.184.216.34:7", r)
			}
		case Denied:
			denied++
		}
	}
	if allowed != held || denied != 2 {
		t.Errorf("record has %d allowed and %d denied connections, want %d and 2: %+v", allowed, denied, held, recs)
	}
	if err := inNamespace(t, c.NamespacePath(), func() error { return nil }); err == nil {
		t.Errorf("the namespace is still open after Close")
	}
	for time.Now().Before(deadline) && runtime.NumGoroutine() > before {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines after Close, %d before:\n%s", n, before, buf[:runtime.Stack(buf, true)])
	}
}

// TestCallDNS asks the call's DNS server, over UDP and TCP inside the
// namespace, for allowed and refused names.
func TestCallDNS(t *testing.T) {
	requireRoot(t)
	c, err := Start(Options{Allow: []string{"echo.test", "inside.test"}, Deny: []string{"no.echo.test"}, Network: testNetwork("127.0.0.1:1")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, proto := range []string{"udp", "tcp"} {
		for _, tc := range []struct {
			name  string
			qtype uint16
			rcode int
			want  string
		}{
			{"echo.test.", dns.TypeA, dns.RcodeSuccess, "93.184.216.34"},
			{"ECHO.test.", dns.TypeA, dns.RcodeSuccess, "93.184.216.34"},
			{"echo.test.", dns.TypeAAAA, dns.RcodeSuccess, ""},
			{"echo.test.", dns.TypeTXT, dns.RcodeSuccess, ""},
			{"other.test.", dns.TypeA, dns.RcodeNameError, ""},
			{"inside.test.", dns.TypeA, dns.RcodeNameError, ""}, // resolves to a private address
			{"93.184.216.34.", dns.TypeA, dns.RcodeNameError, ""},
		} {
			var in *dns.Msg
			err := inNamespace(t, c.NamespacePath(), func() (err error) {
				m := new(dns.Msg)
				m.SetQuestion(tc.name, tc.qtype)
				in, _, err = (&dns.Client{Net: proto, Timeout: 5 * time.Second}).Exchange(m, DNSAddr)
				return err
			})
			if err != nil {
				t.Fatalf("%s %s: %v", proto, tc.name, err)
			}
			var got []string
			for _, rr := range in.Answer {
				if a, ok := rr.(*dns.A); ok {
					got = append(got, a.A.String())
				}
			}
			if in.Rcode != tc.rcode || strings.Join(got, ",") != tc.want {
				t.Errorf("%s %s %s: rcode %d answer %q, want %d %q", proto, tc.name, dns.TypeToString[tc.qtype], in.Rcode, got, tc.rcode, tc.want)
			}
		}
	}
}

// TestCallNamespaceIsolated checks that the proxy listens only inside the
// call's namespace and that the namespace has no route out.
func TestCallNamespaceIsolated(t *testing.T) {
	requireRoot(t)
	up := newEchoUpstream(t)
	c, err := Start(Options{Allow: []string{"echo.test"}, Network: testNetwork(up.ln.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	err = inNamespace(t, c.NamespacePath(), func() error {
		if _, err := net.DialTimeout("tcp", up.ln.Addr().String(), 2*time.Second); err == nil {
			return fmt.Errorf("the host's %s is reachable from the namespace", up.ln.Addr())
		}
		if _, err := net.DialTimeout("tcp", "93.184.216.34:80", 2*time.Second); err == nil {
			return fmt.Errorf("93.184.216.34:80 is reachable from the namespace")
		}
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		if len(ifs) != 1 || ifs[0].Name != "lo" || ifs[0].Flags&net.FlagUp == 0 {
			return fmt.Errorf("interfaces %v, want only lo, up", ifs)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// TestDialAfterClose: a dial that completes after the call ended is
// closed at once and fails (it must not deadlock on the proxy's lock).
func TestDialAfterClose(t *testing.T) {
	up := newEchoUpstream(t)
	rules, err := ParseRules([]string{"echo.test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	nw := testNetwork(up.ln.Addr().String())
	dial := nw.DialContext
	nw.DialContext = func(_ context.Context, network, addr string) (net.Conn, error) {
		return dial(context.Background(), network, addr) // completes although the call ended
	}
	p := newProxy(rules, nw, slog.New(slog.DiscardHandler))
	p.close()
	done := make(chan error, 1)
	go func() {
		_, err := p.dial(context.Background(), "tcp", "echo.test:7")
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "ended") {
			t.Errorf("dial after close = %v, want an error saying the call has ended", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("dial after close did not return")
	}
}
