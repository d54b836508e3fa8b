package api

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
)

// peer is what the service knows of a Unix-socket client: its
// credentials (SO_PEERCRED) and, when it must be refused, why.
type peer struct {
	uid, gid, pid int
	// refusal is non-nil when the peer may not use the service: it is a
	// sandboxed call, or it could not be identified.
	refusal error
}

type peerKey struct{}

// connContext attaches the peer of a Unix-socket connection to the
// connection's context (http.Server.ConnContext). The peer is classified
// here, once, while its process certainly exists.
func connContext(ctx context.Context, c net.Conn) context.Context {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, peerOf(uc, "/proc"))
}

// peerOf reads the peer credentials of uc and classifies the peer's
// process from procRoot. Any failure refuses the peer (fail closed).
func peerOf(uc *net.UnixConn, procRoot string) peer {
	raw, err := uc.SyscallConn()
	if err != nil {
		return peer{uid: -1, gid: -1, refusal: fmt.Errorf("%w: peer credentials: %v", types.ErrForbidden, err)}
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		credErr = err
	}
	if credErr != nil {
		return peer{uid: -1, gid: -1, refusal: fmt.Errorf("%w: peer credentials: %v", types.ErrForbidden, credErr)}
	}
	p := peer{uid: int(cred.Uid), gid: int(cred.Gid), pid: int(cred.Pid)}
	p.refusal = classifyPeer(procRoot, p.pid)
	return p
}

// classifyPeer reads what sandboxedPeer needs about process pid from
// procRoot (normally /proc) and returns an error wrapping ErrForbidden
// when the peer must be refused: it is a sandboxed call, it is not
// visible in the service's pid namespace (pid 0), or its files cannot be
// read.
func classifyPeer(procRoot string, pid int) error {
	if pid <= 0 {
		return fmt.Errorf("%w: the peer process is outside the service's pid namespace", types.ErrForbidden)
	}
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	cgroup, err := os.ReadFile(filepath.Join(dir, "cgroup"))
	if err != nil {
		return fmt.Errorf("%w: reading the peer's cgroup: %v", types.ErrForbidden, err)
	}
	peerNS, err := os.Readlink(filepath.Join(dir, "ns", "pid"))
	if err != nil {
		return fmt.Errorf("%w: reading the peer's pid namespace: %v", types.ErrForbidden, err)
	}
	ownNS, err := os.Readlink(filepath.Join(procRoot, "self", "ns", "pid"))
	if err != nil {
		return fmt.Errorf("%w: reading the service's pid namespace: %v", types.ErrForbidden, err)
	}
	if why := sandboxedPeer(string(cgroup), peerNS, ownNS); why != "" {
		return fmt.Errorf("%w: the peer is a sandboxed call (%s); calls may not use the service", types.ErrForbidden, why)
	}
	return nil
}

// sandboxedPeer says why a peer looks like a sandboxed call, "" when it
// does not. cgroup is the content of /proc/PID/cgroup; peerNS and ownNS
// are the link targets of the peer's and the service's /proc/…/ns/pid.
//
// A peer is a call when its pid namespace is not the service's (every
// backend gives a call its own), or when one of its cgroup paths has a
// component that starts with "dsh-sandbox" (the oci backend's
// /dsh-sandbox/…, containerd's /dsh-sandbox-containerd/…) other than a
// systemd unit "*.service", which is where an operator runs the service
// itself, never a call.
func sandboxedPeer(cgroup, peerNS, ownNS string) string {
	if peerNS != ownNS {
		return "its pid namespace " + peerNS + " is not the service's"
	}
	for _, line := range strings.Split(cgroup, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, seg := range strings.Split(parts[2], "/") {
			if strings.HasPrefix(seg, "dsh-sandbox") && !strings.HasSuffix(seg, ".service") {
				return "its cgroup " + parts[2] + " is a call's"
			}
		}
	}
	return ""
}
