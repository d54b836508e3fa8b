package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"net"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Credential is a secret the proxy adds to the call's HTTPS requests to
// one host, so that the call itself never holds it: the call holds
// Placeholder instead. Value never appears in a log, a record or an
// error.
type Credential struct {
	// Name names the credential in the record (the policy's name).
	Name string
	// Host is the bound host name, lower case, and Port its port (443
	// when zero). Only CONNECT tunnels to exactly host:port are
	// terminated and get the credential.
	Host string
	Port uint16
	// Header is the request header that carries the credential
	// ("Authorization").
	Header string
	// Format is the header's value with "{}" standing for Value
	// ("Bearer {}"); empty means "{}".
	Format string
	// Value is the secret.
	Value string
	// Placeholder is what the call holds in place of Value; unique per
	// call (NewPlaceholder).
	Placeholder string
	// Roots verify the host's certificate; nil means
	// Options.UpstreamCAs.
	Roots *x509.CertPool
}

// PlaceholderPrefix starts every placeholder: recognisably not a secret.
const PlaceholderPrefix = "dsh-sandbox-placeholder-"

// NewPlaceholder returns a placeholder for the credential name, unique
// per call: PlaceholderPrefix, the name and 128 random bits in hex.
func NewPlaceholder(name string) (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return PlaceholderPrefix + name + "-" + hex.EncodeToString(b[:]), nil
}

func (c *Credential) port() uint16 {
	if c.Port == 0 {
		return 443
	}
	return c.Port
}

// headerValue is the header's value that carries Value.
func (c *Credential) headerValue(v string) string {
	f := c.Format
	if f == "" {
		f = "{}"
	}
	return strings.ReplaceAll(f, "{}", v)
}

// inject puts the credential into req, whose host is the bound one:
// without the header it adds it; a header holding the placeholder (as
// is, or inside Basic credentials, scheme in any case, which git sends)
// gets the value in its place; a header holding anything else (another
// credential) is left alone. It reports whether it added the value.
func (c *Credential) inject(req *http.Request) bool {
	vs := req.Header.Values(c.Header)
	if len(vs) == 0 {
		req.Header.Set(c.Header, c.headerValue(c.Value))
		return true
	}
	done := false
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = v
		if strings.Contains(v, c.Placeholder) {
			out[i], done = strings.ReplaceAll(v, c.Placeholder, c.Value), true
			continue
		}
		if scheme, enc, _ := strings.Cut(v, " "); strings.EqualFold(scheme, "Basic") {
			if dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(enc)); err == nil && bytes.Contains(dec, []byte(c.Placeholder)) {
				dec = bytes.ReplaceAll(dec, []byte(c.Placeholder), []byte(c.Value))
				out[i], done = scheme+" "+base64.StdEncoding.EncodeToString(dec), true
			}
		}
	}
	if done {
		req.Header[http.CanonicalHeaderKey(c.Header)] = out
	}
	return done
}

// callCA is a call's certificate authority: its certificate, which the
// call trusts, and one leaf certificate per bound host. The CA's key
// signs the leaves in newCallCA and is dropped there: it never outlives
// Start.
type callCA struct {
	certPEM []byte
	leaves  map[string]*tls.Certificate // by host name
}

// newCallCA makes a CA valid for a day and a leaf for each host.
func newCallCA(hosts []string) (*callCA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	serial := func() *big.Int {
		n, _ := rand.Int(rand.Reader, big.NewInt(math.MaxInt64))
		return n
	}
	caTmpl := &x509.Certificate{
		SerialNumber:                serial(),
		Subject:                     pkix.Name{CommonName: "dsh-sandbox call CA", Organization: []string{"dsh-sandbox"}},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.Add(24 * time.Hour),
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid:       true,
		IsCA:                        true,
		MaxPathLenZero:              true,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         hosts,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	ca := &callCA{certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), leaves: map[string]*tls.Certificate{}}
	for _, h := range hosts {
		if ca.leaves[h] != nil {
			continue
		}
		lkey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
			SerialNumber: serial(),
			Subject:      pkix.Name{CommonName: h},
			DNSNames:     []string{h},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}, caCert, &lkey.PublicKey, key)
		if err != nil {
			return nil, err
		}
		ca.leaves[h] = &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: lkey}
	}
	return ca, nil
}

// checkCredentials checks the credentials of a call; an error wraps
// sandbox.ErrInvalid and names the credential, never its value. Host
// names come out lower case, without a final dot.
func checkCredentials(creds []Credential) error {
	seen := map[string]bool{}
	for i := range creds {
		c := &creds[i]
		c.Host = strings.ToLower(strings.TrimSuffix(c.Host, "."))
		bad := ""
		switch {
		case c.Name == "":
			bad = "no name"
		case checkName(c.Host) != nil:
			bad = "host " + strconv.Quote(c.Host) + " is not a host name"
		case c.Header == "" || strings.ContainsAny(c.Header, " :\r\n"):
			bad = "header " + strconv.Quote(c.Header) + " is not a header name"
		case c.Value == "":
			bad = "an empty value"
		case !strings.HasPrefix(c.Placeholder, PlaceholderPrefix) || strings.Contains(c.Value, c.Placeholder) || strings.Contains(c.Placeholder, c.Value):
			bad = "a placeholder that is not one of NewPlaceholder"
		case strings.ContainsAny(c.Value, "\r\n"):
			bad = "a value with a line break"
		}
		key := net.JoinHostPort(c.Host, strconv.Itoa(int(c.port())))
		if bad == "" && seen[key] {
			bad = "a second credential for " + key
		}
		if bad != "" {
			return sandbox.Errorf(sandbox.ErrInvalid, "egress: credentials[%d] (%s): %s", i, c.Name, bad)
		}
		seen[key] = true
	}
	return nil
}

// credentialHosts are the hosts of creds, in order.
func credentialHosts(creds []Credential) []string {
	hosts := make([]string, 0, len(creds))
	for _, c := range creds {
		hosts = append(hosts, c.Host)
	}
	return hosts
}

// bind takes the call's credentials (opts.Binding's, else
// opts.Credentials, checked and given a CA here) and makes the
// transport of terminated tunnels.
func (p *proxy) bind(opts Options) error {
	creds, ca := opts.Credentials, (*callCA)(nil)
	if opts.Binding != nil {
		creds, ca = opts.Binding.creds, opts.Binding.ca
	}
	if len(creds) == 0 {
		return nil
	}
	creds = slices.Clone(creds)
	if err := checkCredentials(creds); err != nil {
		return err
	}
	if ca == nil {
		var err error
		if ca, err = newCallCA(credentialHosts(creds)); err != nil {
			return sandbox.Errorf(sandbox.ErrInternal, "egress: the call's CA: %w", err)
		}
	}
	p.creds, p.ca = creds, ca
	p.credTransports = map[string]*http.Transport{}
	for _, c := range p.creds {
		r := c.Roots
		if r == nil {
			r = opts.UpstreamCAs
		}
		p.credTransports[c.Name] = p.newCredTransport(r)
	}
	return nil
}

// boundCredential returns the credential bound to host:port ("" port
// means 443), or nil.
func (p *proxy) boundCredential(hostport string) *Credential {
	host, portText, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil {
		return nil
	}
	host, _, isAddr := NormalizeHost(host)
	if isAddr {
		return nil // an address is never a bound host, whatever it serves
	}
	for i := range p.creds {
		if c := &p.creds[i]; c.Host == host && c.port() == uint16(port) {
			return c
		}
	}
	return nil
}

// carriesPlaceholder reports whether a plain HTTP request to a host
// without the credential names a placeholder in its URL or header.
func (p *proxy) carriesPlaceholder(req *http.Request) string {
	for _, c := range p.creds {
		if strings.Contains(req.URL.String(), c.Placeholder) {
			return c.Name
		}
		for _, vs := range req.Header {
			for _, v := range vs {
				if strings.Contains(v, c.Placeholder) {
					return c.Name
				}
			}
		}
	}
	return ""
}

// intercept serves a CONNECT tunnel to the bound host of cred: it
// terminates the call's TLS with the call CA's leaf for the host, reads
// HTTP/1.1 requests (headers bounded as the proxy's own; keep-alive
// and pipelining served in order; HTTP/2 and connection upgrades
// refused, see refuseBound), adds the
// credential to those for the bound host and sends them over TLS,
// verified against the host's trust store (or Options.UpstreamCAs), to
// the address the rules allow; answers go back as they come, with the
// secret replaced by the placeholder should the upstream echo it.
func (p *proxy) intercept(client net.Conn, cred *Credential) {
	defer client.Close()
	cert := p.ca.leaves[cred.Host]
	tc := tls.Server(client, &tls.Config{
		Certificates: []tls.Certificate{*cert},
		NextProtos:   []string{"http/1.1"},
		MinVersion:   tls.VersionTLS12,
	})
	_ = tc.SetDeadline(time.Now().Add(p.headerTimeout))
	if err := tc.Handshake(); err != nil {
		p.recordClient(client, "credential "+strconv.Quote(cred.Name)+": TLS handshake with the call failed: "+err.Error())
		return
	}
	_ = tc.SetDeadline(time.Time{})
	lr := &io.LimitedReader{R: tc, N: maxHeaderBytes}
	br := bufio.NewReader(lr)
	hostport := net.JoinHostPort(cred.Host, strconv.Itoa(int(cred.port())))
	for {
		lr.N = maxHeaderBytes + int64(br.Buffered())
		_ = tc.SetReadDeadline(time.Now().Add(idleTimeout))
		req, err := http.ReadRequest(br)
		if err != nil {
			if lr.N <= 0 {
				p.recordClient(client, fmt.Sprintf("credential %q: request header larger than %d bytes (431)", cred.Name, maxHeaderBytes))
				_, _ = io.WriteString(tc, "HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
			}
			return
		}
		lr.N = math.MaxInt64
		_ = tc.SetReadDeadline(time.Time{})
		if !p.forward(tc, req, cred, hostport) {
			return
		}
	}
}

// forward sends one request read from a terminated tunnel upstream and
// writes the answer; false ends the connection.
func (p *proxy) forward(w net.Conn, req *http.Request, cred *Credential, hostport string) bool {
	defer req.Body.Close()
	if status, reason := refuseBound(req); status != 0 {
		p.record(sandbox.Connection{Host: cred.Host, Port: cred.port(), Verdict: Denied, Reason: "credential " + strconv.Quote(cred.Name) + ": " + reason})
		writeError(w, status, "egress: "+cred.Host+": "+reason)
		return false
	}
	reqHost, _, _ := strings.Cut(req.Host, ":")
	injected := false
	if reqHost == "" || strings.EqualFold(reqHost, cred.Host) {
		injected = cred.inject(req)
	}
	req.URL.Scheme, req.URL.Host, req.Host, req.RequestURI = "https", hostport, hostport, ""
	if req.Header.Get("Host") != "" {
		req.Header.Del("Host")
	}
	req.Header.Del("Accept-Encoding") // answers come unencoded, so that the secret can be taken out of them
	var counted *countedConn
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if tc, ok := info.Conn.(*tls.Conn); ok {
			counted, _ = tc.NetConn().(*countedConn)
		}
	}}
	resp, err := p.credTransports[cred.Name].RoundTrip(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	if counted != nil {
		counted.requests.Add(1)
		if injected {
			counted.injected.Add(1)
		}
	}
	if err != nil {
		msg := "egress: " + cred.Host + ": " + err.Error()
		msg = strings.ReplaceAll(msg, cred.Value, cred.Placeholder)
		writeError(w, http.StatusBadGateway, msg)
		return false
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for i, v := range vs {
			resp.Header[k][i] = strings.ReplaceAll(v, cred.Value, cred.Placeholder)
		}
	}
	// The answer is written through a buffer, flushed before every read
	// of the body that may wait for the upstream: few TLS records, and a
	// streamed answer still reaches the call as it comes.
	bw := bufio.NewWriterSize(w, 32<<10)
	resp.Body = flushFirst{r: &scrubber{r: resp.Body, secret: []byte(cred.Value), with: []byte(cred.Placeholder)}, w: bw}
	hasBody := req.Method != http.MethodHead && resp.StatusCode >= 200 && resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified
	if hasBody && resp.Header.Get("Content-Encoding") == "" {
		resp.ContentLength = -1 // the placeholder's length may differ from the secret's
		resp.Header.Del("Content-Length")
		resp.TransferEncoding = []string{"chunked"}
	}
	resp.Close = resp.Close || req.Close
	if err := resp.Write(bw); err != nil || bw.Flush() != nil {
		return false
	}
	return !resp.Close
}

// flushFirst is a body that flushes w before each read.
type flushFirst struct {
	r io.ReadCloser
	w *bufio.Writer
}

func (f flushFirst) Read(b []byte) (int, error) {
	if err := f.w.Flush(); err != nil {
		return 0, err
	}
	return f.r.Read(b)
}

func (f flushFirst) Close() error { return f.r.Close() }

// writeError answers a request of a terminated tunnel with status and
// msg, closing the connection.
func writeError(w io.Writer, status int, msg string) {
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", status, http.StatusText(status), len(msg), msg)
}

// refuseBound says why a request read from a terminated tunnel is not
// forwarded, with the status of the answer, or 0: HTTP/2 spoken without ALPN
// (the proxy negotiates http/1.1 only) and connection upgrades
// (WebSocket, h2c), after which the proxy could no longer take an
// echoed secret out of what the upstream sends.
func refuseBound(req *http.Request) (int, string) {
	if req.ProtoMajor != 1 {
		return http.StatusHTTPVersionNotSupported, clip(req.Proto) + " is not served on a host with a credential (http/1.1 only)"
	}
	upgrade := req.Header.Get("Upgrade") != ""
	for _, v := range req.Header.Values("Connection") {
		for _, tok := range strings.Split(v, ",") {
			upgrade = upgrade || strings.EqualFold(strings.TrimSpace(tok), "upgrade")
		}
	}
	if upgrade {
		return http.StatusNotImplemented, "connection upgrade (" + clip(req.Header.Get("Upgrade")) + ") refused on a host with a credential: the proxy could not keep the secret out of the upgraded stream"
	}
	return 0, ""
}

// scrubber replaces secret by with in what it reads, also across reads.
type scrubber struct {
	r            io.Reader
	secret, with []byte
	pending      []byte // read, not yet returned
	out          []byte
	buf          []byte
	eof          bool
}

func (s *scrubber) Read(b []byte) (int, error) {
	for len(s.out) == 0 {
		if s.eof {
			if len(s.pending) > 0 {
				s.out, s.pending = s.pending, nil
				continue
			}
			return 0, io.EOF
		}
		if s.buf == nil {
			s.buf = make([]byte, 32<<10)
		}
		n, err := s.r.Read(s.buf)
		s.pending = append(s.pending, s.buf[:n]...)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return 0, err
			}
			s.eof = true
		}
		s.pending = bytes.ReplaceAll(s.pending, s.secret, s.with)
		keep := 0
		if !s.eof {
			keep = s.partial()
		}
		s.out = append(s.out[:0], s.pending[:len(s.pending)-keep]...)
		s.pending = append(s.pending[:0], s.pending[len(s.pending)-keep:]...)
	}
	n := copy(b, s.out)
	s.out = s.out[n:]
	return n, nil
}

// partial is how many bytes at the end of pending could start the
// secret and must wait for the next read: the longest end of pending
// that is a beginning of the secret (so a streamed answer is not held
// back otherwise), or, for a secret over 1 KiB, its length less one.
func (s *scrubber) partial() int {
	n := min(len(s.pending), max(len(s.secret)-1, 0))
	if len(s.secret) > 1<<10 {
		return n
	}
	for k := n; k > 0; k-- {
		if bytes.Equal(s.pending[len(s.pending)-k:], s.secret[:k]) {
			return k
		}
	}
	return 0
}

func (s *scrubber) Close() error {
	if c, ok := s.r.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// credentialUse is what a record says of the credential requests over
// one upstream connection.
func credentialUse(name string, requests, injected int64) string {
	return fmt.Sprintf("credential %q added to %d of %d requests (TLS terminated by the proxy)", name, injected, requests)
}

// bufConn is a hijacked connection whose first bytes wait in r.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// serveBound answers a CONNECT to the bound host of cred: the tunnel is
// opened (200) and terminated by intercept. The host must be allowed
// like any other (policy validation demands it; the dial checks it).
func (p *proxy) serveBound(w http.ResponseWriter, r *http.Request, cred *Credential) {
	if d := p.rules.CheckHost(cred.Host, cred.port()); d.Verdict != Allowed {
		p.record(sandbox.Connection{Host: cred.Host, Port: cred.port(), Verdict: Denied, Reason: d.Reason})
		http.Error(w, "egress: "+cred.Host+" denied: "+d.Reason, http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "egress: cannot take over the connection", http.StatusInternalServerError)
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		conn.Close()
		return
	}
	p.intercept(bufConn{Conn: conn, r: rw.Reader}, cred)
}

// newCredTransport is the transport of terminated tunnels: every
// connection through p.dial (rules, record), marked with its credential,
// TLS verified against roots (nil: the host's trust store), idle
// connections kept for the call's life.
func (p *proxy) newCredTransport(roots *x509.CertPool) *http.Transport {
	return &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := p.dial(ctx, network, addr)
			if cc, ok := c.(*countedConn); ok {
				if cred := p.boundCredential(addr); cred != nil {
					cc.cred = cred.Name
				}
			}
			return c, err
		},
		TLSClientConfig:        &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:    dialTimeout,
		MaxResponseHeaderBytes: maxResponseHeaderBytes,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        idleTimeout,
		ForceAttemptHTTP2:      false,
	}
}
