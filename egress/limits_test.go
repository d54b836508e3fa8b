package egress

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func newTestProxy(t *testing.T, allow []string, nw Network) *proxy {
	t.Helper()
	rules, err := ParseRules(allow, nil)
	if err != nil {
		t.Fatal(err)
	}
	return newProxy(rules, nw, slog.New(slog.DiscardHandler))
}

// TestRecordClipsHost: a refused host of 1 MB is kept as at most
// maxField bytes, marked truncated.
func TestRecordClipsHost(t *testing.T) {
	p := newTestProxy(t, []string{"echo.test"}, testNetwork("127.0.0.1:1"))
	host := strings.Repeat("a", 1<<20)
	if _, err := p.dial(context.Background(), "tcp", host+":80"); err == nil {
		t.Fatal("dial of an unlisted host = nil error, want a refusal")
	}
	recs := p.close()
	if len(recs) != 1 {
		t.Fatalf("record = %d connections, want 1", len(recs))
	}
	r := recs[0]
	if len(r.Host) > maxField || !strings.HasSuffix(r.Host, truncated) || len(r.Reason) > maxField {
		t.Errorf("record host of %d bytes (suffix %q), reason of %d, want at most %d each, host ending in %q", len(r.Host), r.Host[max(0, len(r.Host)-20):], len(r.Reason), maxField, truncated)
	}
}

// TestRecordCountsDropped: connections past maxRecords are counted in a
// last record of verdict dropped.
func TestRecordCountsDropped(t *testing.T) {
	p := newTestProxy(t, nil, Network{})
	for i := range maxRecords + 7 {
		p.record(sandbox.Connection{Host: fmt.Sprintf("h%d.test", i), Verdict: Denied})
	}
	recs := p.close()
	if len(recs) != maxRecords+1 {
		t.Fatalf("record = %d connections, want %d", len(recs), maxRecords+1)
	}
	last := recs[len(recs)-1]
	if last.Verdict != dropped || last.Reason != "7 more connections not recorded" {
		t.Errorf("last record = %+v, want verdict %q counting 7", last, dropped)
	}
}

// TestOwnAddressRefused: an address of the host's own interfaces is
// refused unless an allow entry lists it.
func TestOwnAddressRefused(t *testing.T) {
	up := newEchoUpstream(t)
	nw := testNetwork(up.ln.Addr().String())
	nw.InterfaceAddrs = func() ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	}
	for _, tc := range []struct {
		allow []string
		ok    bool
	}{
		{[]string{"echo.test"}, false},
		{[]string{"echo.test", "93.184.216.34"}, true},
		{[]string{"echo.test", "93.184.216.0/24"}, false}, // wider than the address
		{[]string{"echo.test", "0.0.0.0/0"}, false},
	} {
		p := newTestProxy(t, tc.allow, nw)
		c, err := p.dial(context.Background(), "tcp", "echo.test:7")
		if c != nil {
			c.Close()
		}
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "host's own")) {
			t.Errorf("allow %q: dial echo.test:7 (the host's own address) = %v, want success %v", tc.allow, err, tc.ok)
		}
		p.close()
	}
	nw.InterfaceAddrs = func() ([]netip.Addr, error) { return nil, fmt.Errorf("no netlink") }
	p := newTestProxy(t, []string{"echo.test"}, nw)
	defer p.close()
	if _, err := p.dial(context.Background(), "tcp", "echo.test:7"); err == nil {
		t.Errorf("dial when the host's addresses cannot be listed = nil, want a refusal")
	}
}

// dnsRecorder is a dns.ResponseWriter that keeps the message written.
type dnsRecorder struct {
	dns.ResponseWriter
	msg chan *dns.Msg
}

func (w dnsRecorder) WriteMsg(m *dns.Msg) error { w.msg <- m; return nil }

// TestDNSInFlightLimit: with maxDNSInFlight lookups hanging, one more
// question gets SERVFAIL at once.
func TestDNSInFlightLimit(t *testing.T) {
	var started sync.WaitGroup
	started.Add(maxDNSInFlight)
	release := make(chan struct{})
	nw := Network{LookupNetIP: func(ctx context.Context, host string) ([]netip.Addr, error) {
		started.Done()
		<-release
		return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
	}}
	p := newTestProxy(t, []string{"echo.test"}, nw)
	defer p.close()
	q := new(dns.Msg)
	q.SetQuestion("echo.test.", dns.TypeA)
	w := dnsRecorder{msg: make(chan *dns.Msg, maxDNSInFlight+1)}
	for range maxDNSInFlight {
		go p.ServeDNS(w, q)
	}
	started.Wait()
	p.ServeDNS(w, q) // returns at once: no slot
	if m := <-w.msg; m.Rcode != dns.RcodeServerFailure {
		t.Errorf("question %d rcode = %s, want SERVFAIL", maxDNSInFlight+1, dns.RcodeToString[m.Rcode])
	}
	close(release)
	for range maxDNSInFlight {
		if m := <-w.msg; m.Rcode != dns.RcodeSuccess {
			t.Errorf("a question within the limit got rcode %s, want NOERROR", dns.RcodeToString[m.Rcode])
		}
	}
}

// TestCloseCancelsLookups: Close ends a DNS lookup in flight rather
// than wait for it (a resolver that answers only when cancelled).
func TestCloseCancelsLookups(t *testing.T) {
	requireRoot(t)
	asked := make(chan struct{}, 1)
	nw := Network{LookupNetIP: func(ctx context.Context, host string) ([]netip.Addr, error) {
		asked <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	}}
	c, err := Start(Options{Allow: []string{"echo.test"}, Network: nw})
	if err != nil {
		t.Fatal(err)
	}
	go inNamespace(t, c.NamespacePath(), func() error {
		m := new(dns.Msg)
		m.SetQuestion("echo.test.", dns.TypeA)
		_, _, err := (&dns.Client{Net: "udp", Timeout: time.Second}).Exchange(m, DNSAddr)
		return err
	})
	<-asked
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(dialTimeout / 2):
		t.Fatalf("Close did not return within %v with a lookup in flight", dialTimeout/2)
	}
}

// TestConnectionLimit holds maxConns connections to the proxy: one more
// is closed at once and recorded as denied.
func TestConnectionLimit(t *testing.T) {
	requireRoot(t)
	c, err := Start(Options{Allow: []string{"echo.test"}, Network: testNetwork("127.0.0.1:1")})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var conns []net.Conn
	defer func() {
		for _, conn := range conns {
			conn.Close()
		}
	}()
	err = inNamespace(t, c.NamespacePath(), func() error {
		for i := range maxConns + 1 {
			addr := ProxyAddr
			if i%2 == 1 {
				addr = SOCKSAddr
			}
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				return err
			}
			conns = append(conns, conn)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The two listeners accept on their own, so the connection over the
	// limit is not necessarily the last one dialled: exactly one of them
	// must be closed long before the handshake timeout, the others open.
	deadline := time.Now().Add(handshakeTimeout / 2)
	var closed atomic.Int32
	var wg sync.WaitGroup
	for i, conn := range conns {
		wg.Go(func() {
			conn.SetReadDeadline(deadline)
			n, err := conn.Read(make([]byte, 1))
			switch {
			case n > 0:
				t.Errorf("connection %d: read %d bytes before any handshake", i+1, n)
			case !isTimeout(err):
				closed.Add(1)
			}
		})
	}
	wg.Wait()
	if n := closed.Load(); n != 1 {
		t.Errorf("%d of %d connections closed within %s, want exactly the one over the limit", n, len(conns), handshakeTimeout/2)
	}
	recs := c.Close()
	var limited int
	for _, r := range recs {
		if r.Verdict == Denied && strings.HasPrefix(r.Reason, "connection limit") {
			limited++
		}
	}
	if limited != 1 {
		t.Errorf("record has %d connection-limit refusals, want 1: %+v", limited, recs)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestCountsWriteInFlightAtClose: a Write whose bytes left before the
// connection closed is counted in the record even when it returns only
// after Close began (the writing goroutine was descheduled between the
// write and its count, while the reply was read and the connection
// closed).
func TestCountsWriteInFlightAtClose(t *testing.T) {
	p := newTestProxy(t, nil, Network{})
	slow := &slowWriteConn{wrote: make(chan struct{}), closed: make(chan struct{})}
	c := &countedConn{Conn: slow, p: p, rec: sandbox.Connection{Host: "web.test", Port: 80, Verdict: Allowed}}
	if !p.track(c) {
		t.Fatal("track refused a connection of an open proxy")
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		done <- err
	}()
	<-slow.wrote
	c.Close()
	if err := <-done; err != nil {
		t.Fatalf("Write = %v", err)
	}
	recs := p.close()
	if len(recs) != 1 || recs[0].BytesUp != 18 {
		t.Errorf("record %+v, want one connection of 18 bytes up", recs)
	}
}

// slowWriteConn is a net.Conn whose Write takes the bytes, signals wrote
// and returns only once the connection is closed.
type slowWriteConn struct {
	net.Conn
	wrote, closed chan struct{}
	once          sync.Once
}

func (c *slowWriteConn) Write(b []byte) (int, error) {
	close(c.wrote)
	<-c.closed
	return len(b), nil
}

func (c *slowWriteConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}
