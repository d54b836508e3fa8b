package api

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ListenUnix listens on a Unix socket at the absolute path. The parent
// directory is created 0700 when missing; an existing one that others may
// write to is refused. A stale socket file is replaced, a live one (another
// instance answers) is an error. The socket is 0600 from its creation.
func ListenUnix(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("socket directory %s: %w", dir, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("socket directory %s: %w", dir, err)
	}
	if fi.Mode().Perm()&0o002 != 0 {
		return nil, fmt.Errorf("socket directory %s is world-writable (%v): refusing to listen there", dir, fi.Mode().Perm())
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("socket %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("socket %s: another instance is serving on it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("socket %s: removing the stale socket: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	old := syscall.Umask(0o177) // the socket is born 0600
	l, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return l, nil
}

// ListenTCP listens on host:port. A host that is not a loopback address
// is refused unless allowRemote.
func ListenTCP(hostport string, allowRemote bool) (net.Listener, error) {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil, fmt.Errorf("tcp address %q: %v", hostport, err)
	}
	if !allowRemote && !isLoopback(host) {
		return nil, fmt.Errorf("tcp address %q is not loopback: refusing without allowing remote clients explicitly", hostport)
	}
	return net.Listen("tcp", hostport)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ReadToken reads a bearer token from a file that only its owner may read
// (no group or other permission bits). Surrounding whitespace is trimmed;
// an empty token is an error. The token never appears in errors.
func ReadToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("token file %s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("token file %s has mode %v: others can read it; chmod 600 it", path, fi.Mode().Perm())
	}
	buf := make([]byte, 4097)
	n, err := f.Read(buf)
	if err != nil && n == 0 {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	if n > 4096 {
		return "", fmt.Errorf("token file %s is larger than 4096 bytes", path)
	}
	tok := strings.TrimSpace(string(buf[:n]))
	if tok == "" {
		return "", fmt.Errorf("token file %s is empty", path)
	}
	return tok, nil
}
