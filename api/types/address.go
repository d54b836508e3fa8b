package types

import (
	"fmt"
	"net"
	"net/url"
	"path/filepath"
)

// Listen addresses are "unix:///abs/path.sock" or "tcp://host:port".
const (
	SchemeUnix = "unix"
	SchemeTCP  = "tcp"
)

// ParseListen splits a listen address into its scheme and the socket path
// or host:port.
func ParseListen(addr string) (scheme, target string, err error) {
	u, err := url.Parse(addr)
	if err != nil {
		return "", "", fmt.Errorf("listen address %q: %v", addr, err)
	}
	switch u.Scheme {
	case SchemeUnix:
		p := u.Path
		if u.Host != "" || !filepath.IsAbs(p) {
			return "", "", fmt.Errorf("listen address %q: a unix socket needs an absolute path (unix:///run/x.sock)", addr)
		}
		return SchemeUnix, filepath.Clean(p), nil
	case SchemeTCP:
		if _, _, err := net.SplitHostPort(u.Host); err != nil || u.Path != "" {
			return "", "", fmt.Errorf("listen address %q: tcp needs tcp://HOST:PORT", addr)
		}
		return SchemeTCP, u.Host, nil
	default:
		return "", "", fmt.Errorf("listen address %q: scheme must be unix or tcp", addr)
	}
}
