package egress

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Addresses of the proxy and the DNS server inside a call's namespace.
// The namespace is the call's own, so the ports are always free.
const (
	ProxyAddr = "127.0.0.1:3128"
	DNSAddr   = "127.0.0.1:53"
	SOCKSAddr = "127.0.0.1:1080"
)

// ProxyURL is what HTTP_PROXY and HTTPS_PROXY of a call hold.
const ProxyURL = "http://" + ProxyAddr

// SOCKSURL is what ALL_PROXY of a call holds: the SOCKS5 server, which
// resolves names itself (socks5h), for TCP other than HTTP.
const SOCKSURL = "socks5h://" + SOCKSAddr

// ResolvConf is the resolv.conf of a call: the DNS server on its loopback.
const ResolvConf = "nameserver 127.0.0.1\noptions ndots:1 attempts:2 timeout:2\n"

// NSSwitch is the nsswitch.conf of a call of the host image: files, then
// the call's DNS server (which glibc asks at 127.0.0.1 when there is no
// resolv.conf).
const NSSwitch = "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n"

// Options configure Start. Allow and Deny are required in the sense that
// empty lists allow nothing.
type Options struct {
	// Allow and Deny are the policy's network.allow and network.deny.
	Allow, Deny []string
	// Network is how the proxy reaches the outside; the zero value is
	// the host's resolver and dialer.
	Network Network
	// Logger receives refusals at debug level (host and port, never
	// payloads) and teardown errors; nil logs nothing.
	Logger *slog.Logger
	// Namespace is the path of an existing network namespace to serve
	// in, a running container's ("/proc/<pid>/ns/net"), for a runtime
	// that cannot join one by path (the docker backend); its loopback is
	// brought up. Empty means Start makes a new namespace.
	Namespace string
	// Credentials are added by the proxy to HTTPS requests to their
	// hosts (Credential); nil means none, and no tunnel is terminated.
	Credentials []Credential
	// Binding, when set, holds the credentials and the call's CA made
	// before the network starts (Bind); Credentials are then ignored.
	Binding *Binding
	// UpstreamCAs verify the bound hosts' certificates; nil means the
	// host's trust store.
	UpstreamCAs *x509.CertPool
	// headerTimeout replaces headerTimeout when set (tests).
	headerTimeout time.Duration
}

// Gateway is the network of one call: a network namespace with only the
// loopback interface up, the HTTP proxy listening on ProxyAddr, the
// SOCKS5 server on SOCKSAddr and the DNS server on DNSAddr inside it
// (UDP and TCP), served by goroutines of
// this process that dial from the host's namespace. The call's container
// joins the namespace at NamespacePath. Close ends everything. A Gateway is
// safe for concurrent use.
type Gateway struct {
	ns    *os.File
	p     *proxy
	http  *http.Server
	dns   []*dns.Server
	wg    sync.WaitGroup
	once  sync.Once
	recs  []sandbox.Connection
	close []func() error
}

// Start makes a call's network: it parses the rules (an error wraps
// sandbox.ErrInvalid), creates the namespace (or joins opts.Namespace) on
// a thread of its own (which ends with it, so no other goroutine ever
// runs in the namespace), brings
// its loopback up, opens the listening sockets inside it and serves them.
// It needs CAP_SYS_ADMIN and CAP_NET_ADMIN. On error nothing is left.
func Start(opts Options) (_ *Gateway, err error) {
	rules, err := ParseRules(opts.Allow, opts.Deny)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "egress: network.%v", err)
	}
	c := &Gateway{p: newProxy(rules, opts.Network, opts.Logger)}
	if opts.headerTimeout > 0 {
		c.p.headerTimeout = opts.headerTimeout
	}
	if err := c.p.bind(opts); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	socks, err := c.p.socksServer()
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInternal, "egress: SOCKS5 server: %w", err)
	}
	ls, err := c.listen(opts.Namespace)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "egress: %w", err)
	}
	c.http = &http.Server{
		Handler:           c.p.handler(),
		ReadHeaderTimeout: c.p.headerTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnContext:       connContext,
		ConnState:         c.p.connState,
		ErrorLog:          log.New(io.Discard, "", 0), // a call's broken requests are not the service's errors
	}
	c.dns = []*dns.Server{
		{Listener: &trackedListener{Listener: ls.dnsTCP, p: c.p, limit: maxDNSConns}, Handler: c.p, ReadTimeout: 5 * time.Second},
		{PacketConn: ls.dnsUDP, Handler: c.p},
	}
	c.serve(func() error { return c.http.Serve(&trackedListener{Listener: ls.http, p: c.p}) })
	c.serve(func() error { return socks.Serve(&trackedListener{Listener: ls.socks, p: c.p, handshake: true}) })
	for _, s := range c.dns {
		c.serve(s.ActivateAndServe)
	}
	return c, nil
}

// callListeners are the sockets a call's network serves, inside its
// namespace.
type callListeners struct {
	http, socks, dnsTCP net.Listener
	dnsUDP              net.PacketConn
}

// listen creates the call's namespace (or joins namespace, the path of
// an existing one) on a thread of its own, brings its loopback up and
// opens the listening sockets inside it; c.Close closes what it opened.
func (c *Gateway) listen(namespace string) (callListeners, error) {
	var ls callListeners
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread ends with this goroutine, so its
		// network namespace is never used by another goroutine.
		runtime.LockOSThread()
		done <- func() error {
			ns, err := enterNamespace(namespace)
			if err != nil {
				return err
			}
			c.ns = ns
			if err := loopbackUp(); err != nil {
				return err
			}
			if ls.http, err = net.Listen("tcp4", ProxyAddr); err != nil {
				return err
			}
			c.close = append(c.close, ls.http.Close)
			if ls.socks, err = net.Listen("tcp4", SOCKSAddr); err != nil {
				return err
			}
			c.close = append(c.close, ls.socks.Close)
			if ls.dnsTCP, err = net.Listen("tcp4", DNSAddr); err != nil {
				return err
			}
			c.close = append(c.close, ls.dnsTCP.Close)
			if ls.dnsUDP, err = net.ListenPacket("udp4", DNSAddr); err != nil {
				return err
			}
			c.close = append(c.close, ls.dnsUDP.Close)
			return nil
		}()
	}()
	err := <-done
	return ls, err
}

func (c *Gateway) serve(f func() error) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		_ = f() // ends with an error when Close closes its socket
	}()
}

// CACertPEM is the certificate (PEM) of the call's CA, which signs the
// certificates the proxy shows for the hosts of Options.Credentials:
// the call must trust it. Nil without credentials. Its key existed only
// inside Start.
func (c *Gateway) CACertPEM() []byte {
	if c.p.ca == nil {
		return nil
	}
	return c.p.ca.certPEM
}

// NamespacePath is the path a runtime opens to join the call's network
// namespace (an OCI spec's network namespace path); valid until Close.
func (c *Gateway) NamespacePath() string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), c.ns.Fd())
}

// ProxyEnv are the variables that point a call's tools at the proxy, in
// both cases: HTTP_PROXY and HTTPS_PROXY at the HTTP proxy, ALL_PROXY at
// the SOCKS5 server, and NO_PROXY for the loopback; sorted.
func ProxyEnv() []string {
	var env []string
	for n, u := range map[string]string{"HTTP_PROXY": ProxyURL, "HTTPS_PROXY": ProxyURL, "ALL_PROXY": SOCKSURL} {
		env = append(env, n+"="+u, strings.ToLower(n)+"="+u)
	}
	env = append(env, "NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
	slices.Sort(env)
	return env
}

// WithProxyEnv returns env (NAME=value entries, sorted) with the
// variables of ProxyEnv replacing any of the same names, sorted again.
func WithProxyEnv(env []string) []string { return WithEnv(env, ProxyEnv()) }

// WithEnv returns env (NAME=value entries) with the entries of add
// replacing any of the same names, sorted.
func WithEnv(env, add []string) []string {
	out := slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(add, func(a string) bool { return strings.HasPrefix(a, name+"=") })
	})
	out = append(out, add...)
	slices.Sort(out)
	return out
}

// Close ends the call's network: it stops the listeners, closes every
// connection still open (those a client holds past the end of the call
// too), waits for the servers' goroutines and releases the namespace. It
// returns the record of every connection, in the order they ended.
// Close is idempotent; later calls return the same record.
func (c *Gateway) Close() []sandbox.Connection {
	c.once.Do(func() {
		// First end the lookups and dials in flight, which the DNS
		// servers' shutdown would otherwise wait for.
		c.p.stop()
		var errs []error
		if c.http != nil {
			errs = append(errs, c.http.Close())
		}
		for _, s := range c.dns {
			if err := s.Shutdown(); err != nil && !strings.Contains(err.Error(), "not started") {
				errs = append(errs, err)
			}
		}
		for _, f := range c.close {
			if err := f(); err != nil && !errors.Is(err, net.ErrClosed) {
				errs = append(errs, err)
			}
		}
		c.recs = c.p.close()
		c.wg.Wait()
		if c.ns != nil {
			errs = append(errs, c.ns.Close())
		}
		if err := errors.Join(errs...); err != nil {
			c.p.log.Debug("egress: teardown", "error", err)
		}
	})
	return c.recs
}

// enterNamespace moves the calling thread, which must be locked and
// must end without being unlocked, into the network namespace at path,
// or into a new one when path is empty, and returns the namespace open.
func enterNamespace(path string) (*os.File, error) {
	if path == "" {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return nil, fmt.Errorf("new network namespace: %w", err)
		}
		return os.Open("/proc/thread-self/ns/net")
	}
	ns, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET); err != nil {
		ns.Close()
		return nil, fmt.Errorf("join network namespace %s: %w", path, err)
	}
	return ns, nil
}

// loopbackUp sets the IFF_UP flag of lo in the calling thread's network
// namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback up: %w", err)
	}
	return nil
}
