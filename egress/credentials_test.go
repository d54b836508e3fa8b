package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/iotest"
	"time"

	"github.com/miekg/dns"
	xproxy "golang.org/x/net/proxy"
)

const (
	boundHost = "api.bound.test"
	otherHost = "other.test"
	aliasHost = "alias.test" // resolves to the bound host's address
	secret    = "s3cr3t-token-value-0123456789"
)

// upstreams are HTTPS servers in the test's "net" namespace, with
// certificates of their own test CA: the bound host on public4:443 and
// another host on public6:443. Each remembers the Authorization headers
// it received and answers with the one it got, in the body and in a
// header (an upstream that echoes the credential).
type upstreams struct {
	ca   *x509.CertPool
	mu   sync.Mutex
	seen map[string][]string // host -> Authorization headers received
	last map[string]string   // host -> the last request body received
}

func (u *upstreams) body(host string) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.last[host]
}

func (u *upstreams) got(host string) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.seen[host])
}

func newUpstreams(t testing.TB, n *testNets) *upstreams {
	t.Helper()
	ca, err := newCallCA([]string{boundHost, otherHost})
	if err != nil {
		t.Fatal(err)
	}
	u := &upstreams{ca: x509.NewCertPool(), seen: map[string][]string{}, last: map[string]string{}}
	u.ca.AppendCertsFromPEM(ca.certPEM)
	for addr, host := range map[string]string{public4: boundHost, public6: otherHost} {
		ln, err := listenIn(n.net, net.JoinHostPort(addr, "443"))
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				a := r.Header.Get("Authorization")
				body, _ := io.ReadAll(r.Body)
				u.mu.Lock()
				u.seen[host] = append(u.seen[host], a)
				u.last[host] = string(body)
				u.mu.Unlock()
				w.Header().Set("X-Echo", a)
				fmt.Fprintf(w, "%s got %q", host, a)
			}),
			TLSConfig: &tls.Config{Certificates: []tls.Certificate{*ca.leaves[host]}},
		}
		go srv.ServeTLS(ln, "", "")
		t.Cleanup(func() { srv.Close() })
	}
	return u
}

// callClient is an HTTP client inside the call's namespace, through its
// proxy, trusting the call's CA and the upstreams' test CA.
func callClient(t testing.TB, c *Gateway, extra *x509.CertPool) *http.Client {
	roots := extra.Clone()
	if !roots.AppendCertsFromPEM(c.CACertPEM()) {
		t.Fatal("the call's CA certificate does not parse")
	}
	proxyURL, _ := url.Parse(ProxyURL)
	return &http.Client{Transport: &http.Transport{
		Proxy:           http.ProxyURL(proxyURL),
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, network, addr string) (conn net.Conn, err error) {
			err = joinNamespace(c.NamespacePath(), func() error {
				conn, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return conn, err
		},
	}, Timeout: 20 * time.Second}
}

func startCredCall(t testing.TB, n *testNets, u *upstreams, placeholder string) *Gateway {
	t.Helper()
	c, err := Start(Options{
		Allow:   []string{boundHost, otherHost, aliasHost, public4},
		Network: n.network(map[string]string{boundHost: public4, otherHost: public6, aliasHost: public4}),
		Credentials: []Credential{{Name: "gh", Host: boundHost, Header: "Authorization", Format: "Bearer {}",
			Value: secret, Placeholder: placeholder}},
		UpstreamCAs: u.ca,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// newCredTest makes the test networks, the upstreams and a call whose
// credential "gh" is bound to boundHost with placeholder ph; the call
// is closed when the test ends.
func newCredTest(t testing.TB) (u *upstreams, ph string, c *Gateway) {
	t.Helper()
	n := newTestNets(t)
	u = newUpstreams(t, n)
	ph, err := NewPlaceholder("gh")
	if err != nil {
		t.Fatal(err)
	}
	c = startCredCall(t, n, u, ph)
	t.Cleanup(func() { c.Close() })
	return u, ph, c
}

// TestCredentialInjection: the bound host gets the real token, over
// TLS the proxy terminates with the call's CA and re-encrypts verified
// against the upstream's CA; another host (the placeholder in a header,
// the URL or the body), the bound host's address, another name for it
// or SOCKS5 to it get only the placeholder; a request naming
// another credential gets nothing extra; what the upstream echoes comes
// back with the placeholder; the record says how often the credential
// was used and never holds the secret.
func TestCredentialInjection(t *testing.T) {
	u, ph, c := newCredTest(t)
	var err error
	cl := callClient(t, c, u.ca)
	get := func(target, auth string) (string, http.Header) {
		t.Helper()
		req, _ := http.NewRequest("GET", target, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body), resp.Header
	}
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}
	for _, tc := range []struct {
		target, auth string
		host         string // the upstream that answers
		want         string // the Authorization it must receive
	}{
		{"https://" + boundHost + "/user", "Bearer " + ph, boundHost, "Bearer " + secret},
		{"https://" + boundHost + "/user", "", boundHost, "Bearer " + secret},
		{"https://" + boundHost + "/repo.git/info/refs", basic("x-access-token", ph), boundHost, basic("x-access-token", secret)},                                                       // git
		{"https://" + boundHost + "/repo.git/info/refs", "basic " + basic("x-access-token", ph)[len("Basic "):], boundHost, "basic " + basic("x-access-token", secret)[len("Basic "):]}, // actions/checkout's extraheader
		{"https://" + boundHost + "/user", "Bearer another-credential", boundHost, "Bearer another-credential"},
		{"https://" + otherHost + "/steal", "Bearer " + ph, otherHost, "Bearer " + ph},
		{"https://" + otherHost + "/steal?t=" + ph, "", otherHost, ""},
	} {
		body, hdr := get(tc.target, tc.auth)
		seen := u.got(tc.host)
		if len(seen) == 0 || seen[len(seen)-1] != tc.want {
			t.Errorf("GET %s with %q: %s received %q, want %q", tc.target, tc.auth, tc.host, seen, tc.want)
		}
		if strings.Contains(body, secret) || strings.Contains(fmt.Sprint(hdr), secret) {
			t.Errorf("GET %s: the call saw the secret in the answer: %q %v", tc.target, body, hdr)
		}
	}
	if b, _ := get("https://"+boundHost+"/echo", ""); !strings.Contains(b, ph) {
		t.Errorf("an echo of the credential reached the call as %q, want the placeholder in its place", b)
	}

	// The bound host's address, and another name for it: tunnels, never
	// terminated, so only the placeholder arrives (the call must trust
	// the upstream's own certificate, for the bound name, to get there).
	before := len(u.got(boundHost))
	for _, target := range []string{public4 + ":443", aliasHost + ":443"} {
		conn, br, code := connect(t, c, target)
		if code != http.StatusOK {
			t.Fatalf("CONNECT %s = %d, want 200", target, code)
		}
		tc := tls.Client(bufConn{Conn: conn, r: br}, &tls.Config{ServerName: boundHost, RootCAs: u.ca})
		fmt.Fprintf(tc, "GET /x HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", boundHost, ph)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			t.Fatalf("GET through CONNECT %s: %v", target, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		conn.Close()
		if strings.Contains(string(body), secret) {
			t.Errorf("CONNECT %s: the answer holds the secret: %q", target, body)
		}
	}
	// SOCKS5 to the bound host: a tunnel too, never terminated.
	err = inNamespace(t, c.NamespacePath(), func() error {
		d, err := xproxy.SOCKS5("tcp", SOCKSAddr, nil, xproxy.Direct)
		if err != nil {
			return err
		}
		conn, err := d.Dial("tcp", boundHost+":443")
		if err != nil {
			return err
		}
		defer conn.Close()
		tc := tls.Client(conn, &tls.Config{ServerName: boundHost, RootCAs: u.ca})
		fmt.Fprintf(tc, "GET /x HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", boundHost, ph)
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	if err != nil {
		t.Fatalf("GET through SOCKS5 to %s: %v", boundHost, err)
	}
	if seen := u.got(boundHost)[before:]; len(seen) != 3 || seen[0] != "Bearer "+ph || seen[1] != "Bearer "+ph || seen[2] != "Bearer "+ph {
		t.Errorf("through the address, the alias and SOCKS5 the bound host received %q, want the placeholder three times", seen)
	}

	// The placeholder in a body to another host stays the placeholder.
	resp, err := cl.Post("https://"+otherHost+"/upload", "text/plain", strings.NewReader("token="+ph))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if b := u.body(otherHost); b != "token="+ph {
		t.Errorf("another host received the body %q, want the placeholder unchanged", b)
	}

	// A request inside the bound tunnel for another host gets nothing.
	conn, br, code := connect(t, c, boundHost+":443")
	if code != http.StatusOK {
		t.Fatalf("CONNECT %s = %d", boundHost, code)
	}
	roots := u.ca.Clone()
	roots.AppendCertsFromPEM(c.CACertPEM())
	tc := tls.Client(bufConn{Conn: conn, r: br}, &tls.Config{ServerName: boundHost, RootCAs: roots})
	fmt.Fprintf(tc, "GET /x HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", otherHost)
	if resp, err := http.ReadResponse(bufio.NewReader(tc), nil); err != nil {
		t.Errorf("a request for %s inside the tunnel of %s: %v", otherHost, boundHost, err)
	} else {
		resp.Body.Close()
	}
	conn.Close()
	if seen := u.got(boundHost); seen[len(seen)-1] != "" {
		t.Errorf("a request naming %s inside the tunnel of %s carried %q, want nothing", otherHost, boundHost, seen[len(seen)-1])
	}

	// DNS: a question naming the placeholder below an allowed name is
	// answered NXDOMAIN (no allow entry matches it); the secret itself
	// the call never holds, so it can put it in no question.
	err = inNamespace(t, c.NamespacePath(), func() error {
		m := new(dns.Msg)
		m.SetQuestion(ph+"."+otherHost+".", dns.TypeA)
		in, _, err := (&dns.Client{Net: "udp", Timeout: 5 * time.Second}).Exchange(m, DNSAddr)
		if err == nil && in.Rcode != dns.RcodeNameError {
			err = fmt.Errorf("rcode %s, want NXDOMAIN", dns.RcodeToString[in.Rcode])
		}
		return err
	})
	if err != nil {
		t.Errorf("DNS question with the placeholder: %v", err)
	}

	// Plain HTTP with the placeholder: refused, recorded.
	resp, err = cl.Get("http://" + otherHost + "/?t=" + ph)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("plain HTTP with the placeholder = %d, want 403", resp.StatusCode)
	}

	cl.CloseIdleConnections()
	recs := c.Close()
	var used, refused bool
	for _, r := range recs {
		if strings.Contains(fmt.Sprintf("%+v", r), secret) {
			t.Errorf("a record holds the secret: %+v", r)
		}
		if r.Host == boundHost && r.Verdict == Allowed && strings.Contains(r.Reason, `credential "gh" added to `) {
			used = true
		}
		if r.Verdict == Denied && strings.Contains(r.Reason, "placeholder of credential") {
			refused = true
		}
	}
	if !used || !refused {
		t.Errorf("record: credential use %v, plain-HTTP refusal %v, want both: %+v", used, refused, recs)
	}
}

// TestCredentialRefusesBadUpstream: a bound host whose certificate the
// upstream trust does not verify gets no request (and so no secret).
func TestCredentialRefusesBadUpstream(t *testing.T) {
	n := newTestNets(t)
	u := newUpstreams(t, n)
	ph, _ := NewPlaceholder("gh")
	c, err := Start(Options{
		Allow:   []string{boundHost},
		Network: n.network(map[string]string{boundHost: public4}),
		Credentials: []Credential{{Name: "gh", Host: boundHost, Header: "Authorization", Format: "Bearer {}",
			Value: secret, Placeholder: ph}},
		UpstreamCAs: x509.NewCertPool(), // trusts nothing
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := callClient(t, c, u.ca).Get("https://" + boundHost + "/user")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || strings.Contains(string(body), secret) {
		t.Errorf("GET with an unverifiable upstream = %d %q, want 502 without the secret", resp.StatusCode, body)
	}
	if seen := u.got(boundHost); len(seen) != 0 {
		t.Errorf("the unverified upstream received %q, want no request", seen)
	}
}

// BenchmarkCredentialOverhead measures the median and p95 latency of a
// GET through the proxy to the bound host (TLS terminated, credential
// added, re-encrypted) against the same GET to another host through an
// end-to-end tunnel, alternating, in the same run, with keep-alive
// clients.
func BenchmarkCredentialOverhead(b *testing.B) {
	n := newTestNets(b)
	u := newUpstreams(b, n)
	ph, _ := NewPlaceholder("gh")
	c := startCredCall(b, n, u, ph)
	defer c.Close()
	cl := callClient(b, c, u.ca)
	var with, without []time.Duration
	for i := range 2 * b.N {
		target, list := "https://"+otherHost+"/", &without
		if i%2 == 0 {
			target, list = "https://"+boundHost+"/", &with
		}
		start := time.Now()
		resp, err := cl.Get(target)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		*list = append(*list, time.Since(start))
	}
	q := func(ds []time.Duration, f float64) float64 {
		slices.Sort(ds)
		return float64(ds[int(f*float64(len(ds)-1))]) / float64(time.Microsecond)
	}
	b.ReportMetric(q(with, 0.5), "inject-median-µs")
	b.ReportMetric(q(with, 0.95), "inject-p95-µs")
	b.ReportMetric(q(without, 0.5), "tunnel-median-µs")
	b.ReportMetric(q(without, 0.95), "tunnel-p95-µs")
	b.ReportMetric(q(with, 0.5)/q(without, 0.5), "median-ratio")
}

// TestScrubber: the secret is replaced also when reads split it; what
// cannot start the secret is returned at once, so a streamed answer is
// not held back.
func TestScrubber(t *testing.T) {
	pr, pw := io.Pipe()
	s := &scrubber{r: pr, secret: []byte(secret), with: []byte("PH")}
	// A scrubber that holds back what it should return would wait for
	// more forever: the pipe fails it after a minute instead.
	watchdog := time.AfterFunc(time.Minute, func() { pr.CloseWithError(errors.New("the scrubber waited for more input")) })
	defer watchdog.Stop()
	for _, event := range []string{"data: one\n\n", "data: " + secret + "\n\n", "data: s3c", "r3t-token-value-0123456789 two\n\n"} {
		go pw.Write([]byte(event))
		want := strings.ReplaceAll(event, secret, "PH")
		if strings.HasSuffix(event, "s3c") {
			want = "data: " // the rest could be the secret's start: it waits
		} else if strings.HasPrefix(event, "r3t") {
			want = "PH two\n\n"
		}
		buf := make([]byte, 100)
		n, err := s.Read(buf)
		if err != nil || string(buf[:n]) != want {
			t.Errorf("streamed %q: read %q, %v; want %q", event, buf[:n], err, want)
		}
	}
	pw.Close()
	for _, in := range []string{"", "plain", secret, "a" + secret + "b" + secret, strings.Repeat("x", 40000) + secret + "tail", secret[:5], "xs3cr", "s3cs3cr3t-token-value-0123456789"} {
		want := strings.ReplaceAll(in, secret, "PH")
		for _, r := range []io.Reader{strings.NewReader(in), iotest.OneByteReader(strings.NewReader(in))} {
			got, err := io.ReadAll(&scrubber{r: r, secret: []byte(secret), with: []byte("PH")})
			if err != nil || string(got) != want {
				t.Errorf("scrub(%.40q) = %.40q, %v; want %.40q", in, got, err, want)
			}
		}
	}
}

// TestCredentialBodilessAnswers: HEAD, 204 and 304 answers of the bound
// host come back without a body, and the connection stays usable.
func TestCredentialBodilessAnswers(t *testing.T) {
	u, _, c := newCredTest(t)
	cl := callClient(t, c, u.ca)
	for _, method := range []string{"HEAD", "GET", "HEAD", "GET"} {
		req, _ := http.NewRequest(method, "https://"+boundHost+"/x", nil)
		resp, err := cl.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || (method == "HEAD") != (len(body) == 0) {
			t.Errorf("%s = %d, %d bytes, %v; want 200 with a body only for GET", method, resp.StatusCode, len(body), err)
		}
	}
}

// boundTLS opens a CONNECT tunnel to the bound host and a TLS session
// over it that offers protos by ALPN, trusting the call's CA.
func boundTLS(t *testing.T, c *Gateway, u *upstreams, protos ...string) (*tls.Conn, error) {
	t.Helper()
	conn, br, code := connect(t, c, boundHost+":443")
	if code != http.StatusOK {
		conn.Close()
		t.Fatalf("CONNECT %s = %d, want 200", boundHost, code)
	}
	roots := u.ca.Clone()
	roots.AppendCertsFromPEM(c.CACertPEM())
	tc := tls.Client(bufConn{Conn: conn, r: br}, &tls.Config{ServerName: boundHost, RootCAs: roots, NextProtos: protos})
	_ = tc.SetDeadline(time.Now().Add(time.Minute))
	if err := tc.Handshake(); err != nil {
		conn.Close()
		return nil, err
	}
	t.Cleanup(func() { tc.Close() })
	return tc, nil
}

// TestCredentialKeepAlive sends several requests over one terminated
// tunnel, one after the other and pipelined: each request for the bound
// host gets the secret, the one naming another host in between gets
// nothing, and no answer carries the secret back.
func TestCredentialKeepAlive(t *testing.T) {
	u, ph, c := newCredTest(t)
	tc, err := boundTLS(t, c, u, "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(tc)
	send := func(host, auth string) {
		t.Helper()
		h := ""
		if auth != "" {
			h = "Authorization: " + auth + "\r\n"
		}
		if _, err := fmt.Fprintf(tc, "GET /k HTTP/1.1\r\nHost: %s\r\n%s\r\n", host, h); err != nil {
			t.Fatal(err)
		}
	}
	read := func() {
		t.Helper()
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("reading an answer on the kept-alive tunnel: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Close || strings.Contains(string(body)+fmt.Sprint(resp.Header), secret) {
			t.Errorf("answer %d %q (close %v): want the connection kept and no secret", resp.StatusCode, body, resp.Close)
		}
	}
	before := len(u.got(boundHost))
	send(boundHost, "Bearer "+ph)
	read()
	send(otherHost, "Bearer "+ph)
	read()
	send(boundHost, "")
	read()
	// Pipelined: three requests written before any answer is read.
	send(boundHost, "Bearer "+ph)
	send(otherHost, "")
	send(boundHost+":443", "Bearer "+ph)
	read()
	read()
	read()
	want := []string{"Bearer " + secret, "Bearer " + ph, "Bearer " + secret, "Bearer " + secret, "", "Bearer " + secret}
	if got := u.got(boundHost)[before:]; !slices.Equal(got, want) {
		t.Errorf("the bound host received %q over one kept-alive tunnel, want %q", got, want)
	}
	if got := u.got(otherHost); len(got) != 0 {
		t.Errorf("another host received %q through the bound host's tunnel, want nothing", got)
	}
}

// TestCredentialALPN: the proxy's TLS for a bound host speaks
// http/1.1 only. A client offering h2 and http/1.1 gets http/1.1 and
// the request works; one offering only h2 fails its handshake; HTTP/2
// spoken anyway (prior knowledge) is refused. Neither of the last two
// reaches the upstream.
func TestCredentialALPN(t *testing.T) {
	u, ph, c := newCredTest(t)
	tc, err := boundTLS(t, c, u, "h2", "http/1.1")
	if err != nil {
		t.Fatalf("handshake offering h2 and http/1.1: %v", err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != "http/1.1" {
		t.Errorf("negotiated %q, want http/1.1", p)
	}
	fmt.Fprintf(tc, "GET /a HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n", boundHost, ph)
	if resp, err := http.ReadResponse(bufio.NewReader(tc), nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("request after negotiating http/1.1: %v %v", resp, err)
	}
	if got := u.got(boundHost); !slices.Equal(got, []string{"Bearer " + secret}) {
		t.Errorf("the bound host received %q, want the secret once", got)
	}

	if _, err := boundTLS(t, c, u, "h2"); err == nil {
		t.Errorf("a handshake offering only h2 succeeded, want it refused")
	}

	tc, err = boundTLS(t, c, u)
	if err != nil {
		t.Fatal(err)
	}
	// The client preface, then a SETTINGS frame.
	io.WriteString(tc, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	if err != nil || resp.StatusCode != http.StatusHTTPVersionNotSupported {
		t.Errorf("HTTP/2 with prior knowledge: %v %v, want 505", resp, err)
	}
	if got := u.got(boundHost); len(got) != 1 {
		t.Errorf("the bound host received %q, want only the first request", got)
	}
}

// TestCredentialUpgradeRefused: a connection upgrade (WebSocket, h2c)
// to the bound host is refused (once switched, the proxy could no
// longer keep an echoed secret from the call) and recorded; the
// upstream, which would switch, gets no request, and the tunnel serves
// a plain request afterwards.
func TestCredentialUpgradeRefused(t *testing.T) {
	u, ph, c := newCredTest(t)
	for _, up := range []string{"websocket", "h2c"} {
		tc, err := boundTLS(t, c, u, "http/1.1")
		if err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(tc)
		fmt.Fprintf(tc, "GET /ws HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nConnection: Upgrade\r\nUpgrade: %s\r\n"+
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n", boundHost, ph, up)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("upgrade to %s: %v", up, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotImplemented || !strings.Contains(string(body), "upgrade") {
			t.Errorf("upgrade to %s = %d %q, want 501 naming the upgrade", up, resp.StatusCode, body)
		}
	}
	if got := u.got(boundHost); len(got) != 0 {
		t.Errorf("the bound host received %q for refused upgrades, want nothing", got)
	}
	// The legitimate variant: a plain request on a new tunnel.
	tc, err := boundTLS(t, c, u, "http/1.1")
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(tc, "GET /plain HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", boundHost)
	if resp, err := http.ReadResponse(bufio.NewReader(tc), nil); err != nil || resp.StatusCode != 200 {
		t.Errorf("a plain request after the refusals: %v %v", resp, err)
	}
	if got := u.got(boundHost); !slices.Equal(got, []string{"Bearer " + secret}) {
		t.Errorf("the bound host received %q, want the secret once", got)
	}
	recs := c.Close()
	refused := 0
	for _, r := range recs {
		if r.Verdict == Denied && strings.Contains(r.Reason, "upgrade") {
			refused++
		}
		if strings.Contains(fmt.Sprintf("%+v", r), secret) {
			t.Errorf("a record holds the secret: %+v", r)
		}
	}
	if refused != 2 {
		t.Errorf("the record holds %d upgrade refusals, want 2: %+v", refused, recs)
	}
}
