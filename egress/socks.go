package egress

import (
	"context"
	"io"
	"log"
	"net"

	socks5 "github.com/armon/go-socks5"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// socksName carries the host name a SOCKS5 client asked for from the
// server's resolver to its dialer.
type socksName struct{}

// socksResolver does not resolve: it keeps the name for socksDial, which
// hands it to proxy.dial (which resolves and checks every address
// itself), and gives the SOCKS5 server a placeholder address.
type socksResolver struct{}

func (socksResolver) Resolve(ctx context.Context, name string) (context.Context, net.IP, error) {
	return context.WithValue(ctx, socksName{}, name), net.IPv4zero, nil
}

// socksRules lets CONNECT through to the dialer, which decides; BIND and
// UDP ASSOCIATE are refused and recorded.
type socksRules struct{ p *proxy }

func (r socksRules) Allow(ctx context.Context, req *socks5.Request) (context.Context, bool) {
	if req.RemoteAddr != nil {
		r.p.handshakeDone(req.RemoteAddr.Address())
	}
	if req.Command == socks5.ConnectCommand {
		return ctx, true
	}
	host := req.DestAddr.FQDN
	if host == "" {
		host = req.DestAddr.IP.String()
	}
	r.p.record(sandbox.Connection{Host: host, Port: uint16(req.DestAddr.Port), Verdict: Denied, Reason: "SOCKS5: only CONNECT is served"})
	return ctx, false
}

// socksServer is the SOCKS5 server of a call (no authentication, CONNECT
// only), whose every connection goes through p.dial: the same rules,
// resolution and record as the HTTP proxy.
func (p *proxy) socksServer() (*socks5.Server, error) {
	return socks5.New(&socks5.Config{
		Resolver: socksResolver{},
		Rules:    socksRules{p: p},
		Logger:   log.New(io.Discard, "", 0),
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if name, ok := ctx.Value(socksName{}).(string); ok {
				_, port, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				addr = net.JoinHostPort(name, port)
			}
			return p.dial(ctx, network, addr)
		},
	})
}
