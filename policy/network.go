package policy

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/egress"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// NetworkAllowlist is the network mode whose calls reach, through an
// egress proxy and DNS server on their loopback, only the hosts of
// network.allow (package egress).
const NetworkAllowlist = sandbox.NetworkAllowlist

// networkBackends are the backends that enforce network allowlist.
var networkBackends = []sandbox.Backend{sandbox.BackendOCI, sandbox.BackendContainerd, sandbox.BackendDocker}

// checkNetworkRules checks network.allow and network.deny: lists only
// with mode allowlist, each entry an egress rule (egress.ParseRule), and
// mode allowlist only on a backend that enforces it.
func checkNetworkRules(backend sandbox.Backend, mode sandbox.NetworkMode, allow, deny []string, ps *problems) {
	if mode == NetworkAllowlist && !slices.Contains(networkBackends, backend) && backend.Valid() {
		ps.add("network", "mode %q is not supported by backend %s (no egress proxy there yet); use backend %s", mode, backend, sandbox.JoinModes(networkBackends, " or "))
	}
	if mode != NetworkAllowlist {
		if len(allow) > 0 || len(deny) > 0 {
			ps.add("network", "allow and deny lists need mode %q (mode is %q)", NetworkAllowlist, mode)
		}
		return
	}
	for _, l := range []struct {
		field   string
		entries []string
	}{{"network.allow", allow}, {"network.deny", deny}} {
		if len(l.entries) > egress.MaxRules {
			ps.add(l.field, "has %d entries; the limit is %d", len(l.entries), egress.MaxRules)
			continue
		}
		for i, e := range l.entries {
			if err := egress.ParseRule(e); err != nil {
				ps.add(fmt.Sprintf("%s[%d]", l.field, i), "%v", err)
			}
		}
	}
}

// explainNetwork says what a call under p can reach.
func explainNetwork(p sandbox.Policy, line func(string, ...any)) {
	if p.Network != NetworkAllowlist {
		line("network: %s: a private network namespace with only the loopback interface; nothing outside the call is reachable", p.Network)
		return
	}
	allow := "nothing"
	if len(p.NetworkAllow) > 0 {
		allow = strings.Join(p.NetworkAllow, ", ")
	}
	line("network: allowlist: a private network namespace with only the loopback interface, no route out; HTTP_PROXY and HTTPS_PROXY (and lower-case) point at an egress proxy on %s (HTTP CONNECT and plain HTTP), ALL_PROXY at a SOCKS5 server on %s (CONNECT, for other TCP), and a DNS server on %s answers the call's name lookups, all served by the service, which resolves names itself and dials only allowed addresses", egress.ProxyAddr, egress.SOCKSAddr, egress.DNSAddr)
	line("network: reachable through the proxy: %s (a *.name entry matches the names below name; an entry without a port matches every port)", allow)
	if len(p.NetworkDeny) > 0 {
		line("network: refused even when allowed: %s", strings.Join(p.NetworkDeny, ", "))
	}
	line("network: IP addresses asked for directly are refused unless an allow address or CIDR contains them; private, loopback, link-local, CGNAT, multicast, reserved, documentation, ULA and cloud metadata addresses (169.254.169.254, 100.100.100.200, fd00:ec2::254, fd20:ce::254), also in their IPv4-mapped, NAT64 and 6to4 forms, are refused unless an allow entry names their range or a narrower one inside it (0.0.0.0/0, ::/0 or any wider prefix never reaches them), and the host's own public addresses unless an allow entry is that address; checked on every resolved address, and the proxy dials the address it checked (no DNS rebinding)")
	if rules, err := egress.ParseRules(p.NetworkAllow, p.NetworkDeny); err == nil {
		for _, l := range rules.SpecialReach() {
			line("network: %s", l)
		}
	}
	line("network: DNS answers only names the allow list matches (others get NXDOMAIN); raw TCP or UDP to anything but the proxy and the DNS server fails; /sys is an empty read-only tmpfs on backends oci and containerd (the engine's read-only sysfs on docker); every connection (host, port, bytes, verdict, reason) is in the call's audit record")
}

// WithNetworkNamespace makes the call join the network namespace at path
// (an egress.Call's) instead of getting a new one; apply it after
// WithNamespaces. An empty path is an error: a call of network allowlist
// must never get a namespace of its own choosing. The call's /sys becomes
// an empty read-only tmpfs: sysfs can only be mounted by the owner of the
// network namespace, which a call in a user namespace is not, and the
// host's /sys is not the call's to see.
func WithNetworkNamespace(path string) sandbox.SpecOpt {
	return func(s *specs.Spec) error {
		if path == "" {
			return fmt.Errorf("network namespace: empty path")
		}
		for i, m := range s.Mounts {
			if m.Destination == "/sys" && m.Type == "sysfs" {
				s.Mounts[i] = specs.Mount{Destination: "/sys", Type: "tmpfs", Source: "tmpfs",
					Options: []string{"nosuid", "noexec", "nodev", "ro", "size=4k", "mode=555"}}
			}
		}
		l := ensureLinux(s)
		for i, ns := range l.Namespaces {
			if ns.Type == specs.NetworkNamespace {
				l.Namespaces[i].Path = path
				return nil
			}
		}
		l.Namespaces = append(l.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: path})
		return nil
	}
}

// WithNetworkFiles binds, read-only, the name-service files of a call of
// network allowlist from dir (egress.WriteFiles): for the host image
// /etc/nsswitch.conf, so that glibc asks DNS after /etc/hosts (with no
// resolv.conf it asks 127.0.0.1, the call's DNS server); for other images
// /etc/resolv.conf, pointing at that server.
func WithNetworkFiles(dir string, hostImage bool) sandbox.SpecOpt {
	name, target := egress.ResolvConfFile, "/etc/resolv.conf"
	if hostImage {
		name, target = egress.NSSwitchFile, "/etc/nsswitch.conf"
	}
	return func(s *specs.Spec) error {
		s.Mounts = append(s.Mounts, specs.Mount{
			Destination: target, Type: "bind", Source: filepath.Join(dir, name),
			Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"},
		})
		return nil
	}
}
