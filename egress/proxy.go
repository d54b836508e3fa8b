package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Network is how the proxy reaches the outside. The zero value resolves
// with the host's resolver and dials from the host's network namespace;
// tests set both to reach local servers under made-up names.
type Network struct {
	// LookupNetIP resolves a host name; nil means net.DefaultResolver's.
	LookupNetIP func(ctx context.Context, host string) ([]netip.Addr, error)
	// DialContext opens a TCP connection to an address the rules
	// allowed ("203.0.113.7:443"); nil means a net.Dialer's.
	DialContext func(ctx context.Context, network, address string) (net.Conn, error)
	// InterfaceAddrs lists the host's own addresses, which are refused
	// unless an allow entry lists them; nil means those of the host's
	// interfaces (net.InterfaceAddrs), asked again at most once a second.
	InterfaceAddrs func() ([]netip.Addr, error)
}

// Limits of one call's proxy.
const (
	// maxRecords bounds the connections one call's record keeps; the
	// log says once that later ones were left out, and the record ends
	// with one of verdict dropped that counts them.
	maxRecords = 1000
	// maxField bounds the bytes of a record's Host and Reason (and of
	// the log's host and reason); a longer one is cut and ends in
	// truncated.
	maxField = 255
	// maxConns bounds the connections a call holds open to its proxy,
	// SOCKS5 and DNS (TCP) servers together; one more is closed at once
	// and recorded as denied.
	maxConns = 512
	// maxDNSConns bounds the connections a call holds open to its DNS
	// server over TCP, each of which may hold a 64 KiB message.
	maxDNSConns = 64
	// maxHeaderBytes bounds the request line and header of one request
	// to the HTTP proxy (net/http reads at most 4 KiB more); a larger one
	// is answered 431 and recorded as denied.
	maxHeaderBytes = 16 << 10
	// maxResponseHeaderBytes bounds the header of an upstream's answer
	// to a plain HTTP request; a larger one fails the request (502).
	maxResponseHeaderBytes = 64 << 10
	// headerTimeout bounds how long a client of the HTTP proxy takes to
	// send a request's line and header, from the connection's start or
	// the end of the previous request (slow-loris); a connection past it
	// is closed and recorded as denied. Generous: a call starved of CPU
	// (16 calls on 2 cores) took over 10 s.
	headerTimeout = 30 * time.Second
	// handshakeTimeout bounds a SOCKS5 client's greeting and request.
	handshakeTimeout = 10 * time.Second
	// idleTimeout bounds how long the HTTP proxy keeps an idle client
	// connection between requests.
	idleTimeout = 30 * time.Second
	// dialTimeout bounds the resolution and dial of one connection.
	dialTimeout = 30 * time.Second
	// Verdict of an allowed connection whose upstream could not be
	// reached.
	failed = "failed"
	// Verdict of the last record of a call that had more than
	// maxRecords connections.
	dropped = "dropped"
	// truncated ends a record field cut at maxField bytes.
	truncated = "…(truncated)"
)

// proxy serves one call: the HTTP proxy and DNS server handlers, the
// connections they hold and the record of every connection.
type proxy struct {
	rules *Rules
	net   Network
	log   *slog.Logger
	ctx   context.Context
	stop  context.CancelFunc

	dnsSlots chan struct{} // one per DNS question in flight

	mu        sync.Mutex
	closed    bool
	conns     map[io.Closer]struct{}
	clients   int                    // client connections open (clientConn)
	handshake map[string]*clientConn // SOCKS5 clients before their request, by remote address
	records   []sandbox.Connection
	dropped   int
	learned   map[netip.Addr]string // addresses the DNS server answered, by name
	own       []netip.Addr          // the host's addresses, asked at ownAt
	ownAt     time.Time

	headerTimeout time.Duration // headerTimeout, or a test's

	creds          []Credential               // bound to hosts (Options.Credentials)
	ca             *callCA                    // nil without credentials
	credTransports map[string]*http.Transport // of terminated tunnels, by credential name
}

func newProxy(rules *Rules, nw Network, log *slog.Logger) *proxy {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if nw.LookupNetIP == nil {
		nw.LookupNetIP = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if nw.DialContext == nil {
		nw.DialContext = (&net.Dialer{}).DialContext
	}
	if nw.InterfaceAddrs == nil {
		nw.InterfaceAddrs = interfaceAddrs
	}
	ctx, stop := context.WithCancel(context.Background())
	return &proxy{
		rules: rules, net: nw, log: log, ctx: ctx, stop: stop,
		dnsSlots:      make(chan struct{}, maxDNSInFlight),
		conns:         map[io.Closer]struct{}{},
		handshake:     map[string]*clientConn{},
		learned:       map[netip.Addr]string{},
		headerTimeout: headerTimeout,
	}
}

// handler is the HTTP proxy: CONNECT tunnels and plain HTTP requests,
// every upstream connection opened by p.dial. Plain HTTP connections are
// not kept alive, so each is recorded when its request ends.
func (p *proxy) handler() http.Handler {
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = log.New(io.Discard, "", 0)
	gp.Tr = &http.Transport{
		Proxy:                  nil, // never the service's own proxy settings
		DialContext:            p.dial,
		DisableKeepAlives:      true,
		TLSHandshakeTimeout:    dialTimeout,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
	}
	gp.ConnectDialWithReq = func(req *http.Request, network, addr string) (net.Conn, error) {
		return p.dial(req.Context(), network, addr)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cc, ok := r.Context().Value(clientKey{}).(*clientConn); ok {
			cc.pending.Store(false) // the header arrived whole
			cc.served.Store(true)
		}
		if len(p.creds) > 0 {
			if r.Method == http.MethodConnect {
				if cred := p.boundCredential(r.Host); cred != nil {
					p.serveBound(w, r, cred)
					return
				}
			} else if name := p.carriesPlaceholder(r); name != "" {
				reason := fmt.Sprintf("the placeholder of credential %q in a plain HTTP request (credentials go only over TLS to their host)", name)
				p.recordClient(r.Context().Value(clientKey{}).(net.Conn), reason)
				http.Error(w, "egress: "+reason, http.StatusForbidden)
				return
			}
		}
		gp.ServeHTTP(w, r)
	})
}

// clientKey is the context key of the *clientConn a request of the HTTP
// proxy arrived on.
type clientKey struct{}

// connContext gives a request's context the connection it arrived on.
func connContext(ctx context.Context, c net.Conn) context.Context {
	return context.WithValue(ctx, clientKey{}, c)
}

// connState follows a connection to the HTTP proxy: from the first byte
// of a request until its handler runs, the request is pending. A
// connection that closes after a read deadline passed while a request
// was pending, or before any request came, is recorded as a refusal
// (headerTimeout); one closed idle between requests (idleTimeout) is not. The refusals net/http
// answers itself (431 for a header over maxHeaderBytes, 400 for a
// malformed request) are recorded by clientConn.Write.
func (p *proxy) connState(c net.Conn, s http.ConnState) {
	cc, ok := c.(*clientConn)
	if !ok {
		return
	}
	switch s {
	case http.StateActive:
		cc.pending.Store(true)
	case http.StateClosed:
		if cc.timedOut.Load() && (cc.pending.Load() || !cc.served.Load()) && !cc.refused.Swap(true) {
			p.recordClient(cc, fmt.Sprintf("HTTP proxy: request header not received within %v", p.headerTimeout))
		}
	}
}

// recordClient records a refusal of a client connection, under the
// address of the listener it arrived on.
func (p *proxy) recordClient(c net.Conn, reason string) {
	local, _ := netip.ParseAddrPort(c.LocalAddr().String())
	p.record(sandbox.Connection{Host: local.Addr().String(), Port: local.Port(), Verdict: Denied, Reason: reason})
	p.log.Debug("egress: denied", "reason", reason)
}

// track registers an open connection, closed by close at the latest; it
// returns false (and closes c) once the proxy is closed.
func (p *proxy) track(c io.Closer) bool {
	p.mu.Lock()
	closed := p.closed
	if !closed {
		p.conns[c] = struct{}{}
	}
	p.mu.Unlock()
	if closed {
		c.Close() // outside the lock: a connection's Close untracks it
	}
	return !closed
}

func (p *proxy) untrack(c io.Closer) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// clip cuts s to maxField bytes, at a UTF-8 boundary, ending in
// truncated.
func clip(s string) string {
	if len(s) <= maxField {
		return s
	}
	s = strings.ToValidUTF8(s[:maxField-len(truncated)], "")
	return s + truncated
}

// record adds one connection to the call's record, its host and reason
// clipped.
func (p *proxy) record(c sandbox.Connection) {
	c.Host, c.Reason = clip(c.Host), clip(c.Reason)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.records) >= maxRecords {
		if p.dropped == 0 {
			p.log.Warn("egress: too many connections; later ones are not recorded", "limit", maxRecords)
		}
		p.dropped++
		return
	}
	p.records = append(p.records, c)
}

// dial is the only way out: it checks host and port, resolves a name
// itself, checks every address, and dials only an address it checked.
// A refusal is recorded at once; an allowed connection when it closes.
func (p *proxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portText, err := net.SplitHostPort(addr)
	port, perr := strconv.ParseUint(portText, 10, 16)
	if err != nil || perr != nil || port == 0 {
		p.record(sandbox.Connection{Host: addr, Verdict: Denied, Reason: "not a host:port"})
		return nil, fmt.Errorf("egress: %q is not a host:port", addr)
	}
	rec := sandbox.Connection{Host: host, Port: uint16(port)}
	deny := func(reason string) (net.Conn, error) {
		rec.Verdict, rec.Reason = Denied, reason
		p.record(rec)
		p.log.Debug("egress: denied", "host", clip(host), "port", port, "reason", clip(reason))
		return nil, fmt.Errorf("egress: %s:%d denied: %s", host, port, reason)
	}
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return deny("network " + network + " is not tcp")
	}
	ctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	stop := context.AfterFunc(p.ctx, cancel)
	defer stop()

	name, a, isAddr := NormalizeHost(host)
	var addrs []netip.Addr
	if isAddr {
		p.mu.Lock()
		learned, ok := p.learned[a]
		p.mu.Unlock()
		if ok {
			// An address the DNS server gave this call for an allowed
			// name is that name (a client that resolved first).
			name, isAddr = learned, false
		}
		addrs = []netip.Addr{a}
	}
	d := p.rules.CheckHost(name, uint16(port))
	if isAddr {
		d = p.rules.CheckHost(a.String(), uint16(port))
	}
	if d.Verdict != Allowed {
		return deny(d.Reason)
	}
	if addrs == nil {
		if addrs, err = p.net.LookupNetIP(ctx, name); err != nil {
			return deny("resolving " + name + " failed: " + dnsError(err))
		}
	}
	ok, why := p.filter(addrs, uint16(port))
	if len(ok) == 0 {
		return deny(why)
	}
	rec.Verdict, rec.Reason = Allowed, d.Reason
	var errs []error
	for _, a := range ok {
		target := netip.AddrPortFrom(a, uint16(port)).String()
		c, err := p.net.DialContext(ctx, "tcp", target)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		rec.Address = target
		cc := &countedConn{Conn: c, p: p, rec: rec}
		if !p.track(cc) {
			return nil, errors.New("egress: the call has ended")
		}
		return cc, nil
	}
	rec.Verdict, rec.Reason = failed, d.Reason+"; dial failed: "+errors.Join(errs...).Error()
	p.record(rec)
	return nil, fmt.Errorf("egress: %s:%d: %w", host, port, errors.Join(errs...))
}

// filter keeps the addresses CheckAddr allows that are not the host's
// own; why is the first refusal. A public address of the host's is kept
// only when an allow entry is that address; a special one (loopback,
// private, …) when CheckAddr allowed it, which takes an entry naming its
// range or a narrower one.
func (p *proxy) filter(addrs []netip.Addr, port uint16) (ok []netip.Addr, why string) {
	for _, a := range addrs {
		d := p.rules.CheckAddr(a, port)
		if d.Verdict == Allowed && SpecialRange(a) == "" && p.isOwn(a) && !p.rules.namesAddr(a, port) {
			d = Decision{Denied, "address " + a.Unmap().String() + " is the host's own; only an allow entry that is that address reaches it"}
		}
		if d.Verdict == Allowed {
			ok = append(ok, a.Unmap())
		} else if why == "" {
			why = d.Reason
		}
	}
	if why == "" {
		why = "the name has no address"
	}
	return ok, why
}

// dnsError shortens a resolver error to its cause, without the resolver
// address.
func dnsError(err error) string {
	var de *net.DNSError
	if errors.As(err, &de) {
		if de.IsNotFound {
			return "no such host"
		}
		return de.Err
	}
	return err.Error()
}

// isOwn reports whether a is one of the host's addresses, asking
// InterfaceAddrs again when the last answer is older than a second; when
// the host's addresses cannot be listed, every address counts as its own
// (fail closed).
func (p *proxy) isOwn(a netip.Addr) bool {
	a = a.Unmap()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.own == nil || time.Since(p.ownAt) > time.Second {
		own, err := p.net.InterfaceAddrs()
		if err != nil {
			p.log.Warn("egress: listing the host's addresses", "error", err)
			return true
		}
		p.own, p.ownAt = append(own[:0:0], own...), time.Now()
	}
	return slices.Contains(p.own, a)
}

// interfaceAddrs lists the addresses of the host's interfaces, unmapped.
func interfaceAddrs() ([]netip.Addr, error) {
	ias, err := net.InterfaceAddrs()
	if err != nil {
		return nil, err
	}
	own := []netip.Addr{}
	for _, ia := range ias {
		if pf, err := netip.ParsePrefix(ia.String()); err == nil {
			own = append(own, pf.Addr().Unmap())
		}
	}
	return own, nil
}

// close ends the proxy: the connections still open are closed and the
// record is returned, ordered as the connections ended.
func (p *proxy) close() []sandbox.Connection {
	p.stop()
	for _, t := range p.credTransports {
		t.CloseIdleConnections()
	}
	p.mu.Lock()
	p.closed = true
	open := make([]io.Closer, 0, len(p.conns))
	for c := range p.conns {
		open = append(open, c)
	}
	p.mu.Unlock()
	for _, c := range open {
		c.Close() // a countedConn records itself
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	recs := slices.Clone(p.records)
	if p.dropped > 0 {
		recs = append(recs, sandbox.Connection{Verdict: dropped, Reason: fmt.Sprintf("%d more connections not recorded", p.dropped)})
	}
	return recs
}

// countedConn is an upstream connection that counts its bytes and records
// itself when closed. It keeps the half-close methods of a TCP
// connection, which the proxy's tunnels use.
type countedConn struct {
	net.Conn
	p        *proxy
	rec      sandbox.Connection
	up, down atomic.Int64
	// io is held shared by every Read and Write until its bytes are
	// counted, and whole by Close before it records them: a Write whose
	// reply arrived is counted even when the connection closes before
	// the writing goroutine runs again.
	io        sync.RWMutex
	closeOnce sync.Once
	// Of a terminated tunnel's upstream: the credential, the requests
	// sent and how many of them got it.
	cred               string
	requests, injected atomic.Int64
}

func (c *countedConn) Read(b []byte) (int, error) {
	c.io.RLock()
	defer c.io.RUnlock()
	n, err := c.Conn.Read(b)
	c.down.Add(int64(n))
	return n, err
}

func (c *countedConn) Write(b []byte) (int, error) {
	c.io.RLock()
	defer c.io.RUnlock()
	n, err := c.Conn.Write(b)
	c.up.Add(int64(n))
	return n, err
}

// CloseWrite half-closes a TCP connection, else closes it.
func (c *countedConn) CloseWrite() error {
	if hc, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return c.Close()
}

// CloseRead half-closes a TCP connection, else closes it.
func (c *countedConn) CloseRead() error {
	if hc, ok := c.Conn.(interface{ CloseRead() error }); ok {
		return hc.CloseRead()
	}
	return c.Close()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() {
		c.p.untrack(c)
		// The close ended every Read and Write in progress; wait until
		// they counted their bytes.
		c.io.Lock()
		defer c.io.Unlock()
		c.rec.BytesUp, c.rec.BytesDown = c.up.Load(), c.down.Load()
		if c.cred != "" {
			c.rec.Reason += "; " + credentialUse(c.cred, c.requests.Load(), c.injected.Load())
		}
		c.p.record(c.rec)
	})
	return err
}

// clientConn is a connection the call opened to the proxy, closed at the
// end of the call at the latest. It keeps the half-close methods.
type clientConn struct {
	*net.TCPConn
	p    *proxy
	l    *trackedListener
	once sync.Once
	// Of the HTTP proxy's connections (see proxy.connState): a request
	// is pending, one was served, a read met its deadline, a refusal
	// was recorded.
	pending, served, timedOut, refused atomic.Bool
}

// Read notes a read that met its deadline.
func (c *clientConn) Read(b []byte) (int, error) {
	n, err := c.TCPConn.Read(b)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		c.timedOut.Store(true)
	}
	return n, err
}

// Write records the error answer net/http writes itself to a pending
// request (a header over maxHeaderBytes, a malformed request).
func (c *clientConn) Write(b []byte) (int, error) {
	if c.pending.Load() && bytes.HasPrefix(b, []byte("HTTP/1.1 4")) && !c.refused.Swap(true) {
		status, _, _ := bytes.Cut(b[len("HTTP/1.1 "):], []byte("\r\n"))
		reason := "HTTP proxy: " + string(status)
		if bytes.HasPrefix(status, []byte("431")) {
			reason = fmt.Sprintf("HTTP proxy: request header larger than %d bytes (431)", maxHeaderBytes)
		}
		c.p.recordClient(c, reason)
	}
	return c.TCPConn.Write(b)
}

// Close untracks the connection; a SOCKS5 client that did not send its
// request within handshakeTimeout is recorded as a refusal.
func (c *clientConn) Close() error {
	c.once.Do(func() {
		c.p.mu.Lock()
		delete(c.p.conns, c)
		_, handshake := c.p.handshake[c.RemoteAddr().String()]
		delete(c.p.handshake, c.RemoteAddr().String())
		c.p.clients--
		c.l.open--
		c.p.mu.Unlock()
		if handshake && c.timedOut.Load() && !c.refused.Swap(true) {
			c.p.recordClient(c, fmt.Sprintf("SOCKS5: request not received within %v", handshakeTimeout))
		}
	})
	return c.TCPConn.Close()
}

// trackClient registers a connection the call opened on l, unless the
// call ended, holds maxConns already or l holds its own limit; then it
// closes c and full says which limit it met.
func (p *proxy) trackClient(c *clientConn, l *trackedListener) (ok bool, full string) {
	p.mu.Lock()
	closed := p.closed
	switch {
	case p.clients >= maxConns:
		full = fmt.Sprintf("connection limit: %d connections to the proxy are open", maxConns)
	case l.limit > 0 && l.open >= l.limit:
		full = fmt.Sprintf("connection limit: %d connections to %s are open", l.limit, l.Addr())
	}
	if !closed && full == "" {
		p.conns[c] = struct{}{}
		p.clients++
		l.open++
		if l.handshake {
			p.handshake[c.RemoteAddr().String()] = c
		}
	}
	p.mu.Unlock()
	if closed || full != "" {
		c.TCPConn.Close()
	}
	return !closed && full == "", full
}

// handshakeDone lifts the handshake deadline of the SOCKS5 client at
// remote, whose request was read.
func (p *proxy) handshakeDone(remote string) {
	p.mu.Lock()
	c := p.handshake[remote]
	delete(p.handshake, remote)
	p.mu.Unlock()
	if c != nil {
		_ = c.SetDeadline(time.Time{})
	}
}

// trackedListener registers every accepted connection with the proxy,
// closing one over maxConns, or over its own limit, at once (recorded
// as denied). With handshake, a connection must send its SOCKS5 request
// within handshakeTimeout.
type trackedListener struct {
	net.Listener
	p         *proxy
	handshake bool
	// limit bounds the connections open on this listener; 0 means
	// only maxConns does.
	limit int
	open  int // guarded by p.mu
}

func (l *trackedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc, ok := c.(*net.TCPConn)
		if !ok {
			c.Close()
			continue
		}
		if l.handshake {
			_ = tc.SetDeadline(time.Now().Add(handshakeTimeout))
		}
		cc := &clientConn{TCPConn: tc, p: l.p, l: l}
		ok, full := l.p.trackClient(cc, l)
		if full != "" {
			l.p.recordClient(tc, full)
			continue
		}
		if !ok {
			return nil, net.ErrClosed
		}
		return cc, nil
	}
}
