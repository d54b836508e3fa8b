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
// mode allowlist only on a backend that enforces it (of a known backend:
// an unknown one is reported as such).
func checkNetworkRules(backend sandbox.Backend, known bool, mode sandbox.NetworkMode, allow, deny []string, ps *problems) {
	if mode == NetworkAllowlist && !slices.Contains(networkBackends, backend) && known {
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
	for _, c := range p.Credentials {
		from := "the service's variable " + c.ValueEnv
		if c.ValueFile != "" {
			from = "the operator-owned file " + c.ValueFile
		}
		held := "no variable of the call names it"
		if c.Variable != "" {
			held = "the call's " + c.Variable + " holds a placeholder unique to the call"
		}
		trust := "the host's trust store"
		if c.UpstreamCAFile != "" {
			trust = "the operator's CA file " + c.UpstreamCAFile
		}
		line("network: credential %q: the proxy puts it in header %s (%q) of HTTPS requests to %s:%d, read at call time from %s; %s, which the proxy replaces (a request without the header gets it added; one with another value gets nothing); TLS to %s is terminated by the proxy with a CA made for the call (the call trusts it: SSL_CERT_FILE, NODE_EXTRA_CA_CERTS, REQUESTS_CA_BUNDLE, GIT_SSL_CAINFO, CURL_CA_BUNDLE and the bundle at %s) and re-encrypted, verified against %s; the value never enters the call and is redacted from its output and audit record", c.Name, c.Header, c.Format, c.Host, c.Port, from, held, c.Host, egress.CABundlePath, trust)
	}
	line("network: DNS answers only names the allow list matches (others get NXDOMAIN); raw TCP or UDP to anything but the proxy and the DNS server fails; /sys is an empty read-only tmpfs on backends oci and containerd (the engine's read-only sysfs on docker); every connection (host, port, bytes, verdict, reason) is in the call's audit record")
}

// WithNetworkNamespace makes the call join the network namespace at path
// (an egress.Gateway's) instead of getting a new one; apply it after
// WithNamespaces. An empty path is an error: a call of network allowlist
// must never get a namespace of its own choosing. The call's /sys becomes
// an empty read-only tmpfs: sysfs can only be mounted by the owner of the
// network namespace, which a call in a user namespace is not, and the
// host's /sys is not the call's to see.
func WithNetworkNamespace(path string) SpecOpt {
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

// WithEgress makes a call join its egress network st (egress.StartCall):
// the network namespace (WithNetworkNamespace), the name-service files
// for an image that is the host's or not (WithNetworkFiles) and, with
// credentials, the call's CA bundle (WithCABundle).
func WithEgress(st *egress.Setup, hostImage bool) SpecOpt {
	opts := []SpecOpt{
		WithNetworkNamespace(st.Gateway.NamespacePath()),
		WithNetworkFiles(st.Files, hostImage),
	}
	if st.CABundle != "" {
		opts = append(opts, WithCABundle(st.CABundle))
	}
	return func(s *specs.Spec) error {
		for _, o := range opts {
			if err := o(s); err != nil {
				return err
			}
		}
		return nil
	}
}

// WithNetworkFiles binds, read-only, the name-service files of a call of
// network allowlist from dir (egress.WriteFiles): for the host image
// /etc/nsswitch.conf, so that glibc asks DNS after /etc/hosts (with no
// resolv.conf it asks 127.0.0.1, the call's DNS server); for other images
// /etc/resolv.conf, pointing at that server.
func WithNetworkFiles(dir string, hostImage bool) SpecOpt {
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

// Credential defaults and bounds (network.credentials).
const (
	// CABundlePath is where a call with credentials finds its CA bundle
	// (the host's, plus the call's CA), bound read-only over the
	// Debian bundle's path.
	CABundlePath            = "/etc/ssl/certs/ca-certificates.crt"
	DefaultCredentialHeader = "Authorization"
	DefaultCredentialFormat = "Bearer {}"
	// MaxCredentials bounds the entries of network.credentials.
	MaxCredentials = 16
)

// credentialBackends are the backends whose calls get credentials at
// egress: those that serve the egress proxy in a namespace they join,
// and bind the call's CA bundle into the call.
var credentialBackends = []sandbox.Backend{sandbox.BackendOCI, sandbox.BackendDocker, sandbox.BackendContainerd}

// credentialsFromDocument resolves network.credentials, filling in the
// defaults (port 443, header Authorization, format "Bearer {}"); the
// values are checked by checkCredentials.
func credentialsFromDocument(in []documentCredential, ps *problems) []sandbox.Credential {
	var out []sandbox.Credential
	for i, d := range in {
		c := sandbox.Credential{Port: 443, Header: DefaultCredentialHeader, Format: DefaultCredentialFormat}
		str(&c.Name, d.Name)
		str(&c.Host, d.Host)
		str(&c.Header, d.Header)
		str(&c.Format, d.Format)
		str(&c.Variable, d.Variable)
		str(&c.UpstreamCAFile, d.UpstreamCA)
		if d.Port != nil {
			if *d.Port < 1 || *d.Port > 65535 {
				ps.add(fmt.Sprintf("network.credentials[%d].port", i), "%d is not a port from 1 to 65535", *d.Port)
			} else {
				c.Port = uint16(*d.Port)
			}
		}
		if v := d.Value; v != nil {
			str(&c.ValueEnv, v.Env)
			str(&c.ValueFile, v.File)
		}
		out = append(out, c)
	}
	return out
}

// checkCredentials checks network.credentials: mode allowlist on a
// backend that injects them, each entry named (unique), its host a name
// the allow list reaches on its port, a header name, a format with {},
// an optional variable name, and exactly one value source. knownBackend
// says whether p.Backend passed its own check.
func checkCredentials(p sandbox.Policy, knownBackend bool, ps *problems) {
	if len(p.Credentials) == 0 {
		return
	}
	switch {
	case p.Network != NetworkAllowlist:
		ps.add("network.credentials", "need mode %q (mode is %q)", NetworkAllowlist, p.Network)
		return
	case !slices.Contains(credentialBackends, p.Backend) && knownBackend:
		ps.add("network.credentials", "backend %s cannot inject credentials: it serves no egress proxy for its calls; use backend %s", p.Backend, sandbox.JoinModes(credentialBackends, " or "))
	case len(p.Credentials) > MaxCredentials:
		ps.add("network.credentials", "has %d entries; the limit is %d", len(p.Credentials), MaxCredentials)
		return
	}
	rules, rerr := egress.ParseRules(p.NetworkAllow, p.NetworkDeny)
	if rerr != nil {
		rules = nil // reported by checkNetworkRules
	}
	cc := credentialCheck{rules: rules, names: map[string]bool{}, vars: map[string]bool{}, hosts: map[string]bool{}, ps: ps}
	for i, c := range p.Credentials {
		cc.check(i, c)
	}
}

// credentialCheck checks the entries of network.credentials one after
// the other, remembering the names, variables and hosts seen.
type credentialCheck struct {
	rules              *egress.Rules // nil when network.allow or deny is invalid
	names, vars, hosts map[string]bool
	ps                 *problems
}

// check checks entry i, c.
func (cc *credentialCheck) check(i int, c sandbox.Credential) {
	f := func(field string) string { return fmt.Sprintf("network.credentials[%d].%s", i, field) }
	switch {
	case c.Name == "":
		cc.ps.add(f("name"), "is missing")
	case !credentialName(c.Name):
		cc.ps.add(f("name"), "%q: want 1 to 32 of a-z, 0-9 and '-'", c.Name)
	case cc.names[c.Name]:
		cc.ps.add(f("name"), "%q is used twice", c.Name)
	}
	cc.names[c.Name] = true
	host, _, isAddr := egress.NormalizeHost(c.Host)
	switch {
	case c.Host == "":
		cc.ps.add(f("host"), "is missing")
	case isAddr || strings.ContainsAny(host, "*:/[]") || egress.ParseRule(host) != nil || host != c.Host:
		cc.ps.add(f("host"), "%q: want a lower-case host name (no address, wildcard or port)", c.Host)
	case cc.rules != nil && cc.rules.CheckHost(host, c.Port).Verdict != egress.Allowed:
		cc.ps.add(f("host"), "%s:%d is not reached by network.allow (%s)", host, c.Port, cc.rules.CheckHost(host, c.Port).Reason)
	case cc.hosts[fmt.Sprintf("%s:%d", host, c.Port)]:
		cc.ps.add(f("host"), "%s:%d has a credential already", host, c.Port)
	}
	cc.hosts[fmt.Sprintf("%s:%d", host, c.Port)] = true
	cc.checkInjection(f, c)
}

// checkInjection checks how credential c is injected: its header, its
// format, its variable and its value source; f names a field of c.
func (cc *credentialCheck) checkInjection(f func(string) string, c sandbox.Credential) {
	if c.Header == "" || strings.ContainsFunc(c.Header, func(r rune) bool { return !headerChar(r) }) {
		cc.ps.add(f("header"), "%q is not a header name", c.Header)
	}
	if !strings.Contains(c.Format, "{}") || strings.ContainsAny(c.Format, "\r\n\x00") {
		cc.ps.add(f("format"), "%q: want the header's value with {} standing for the secret, on one line", c.Format)
	}
	if c.Variable != "" {
		switch {
		case !portableName(c.Variable):
			cc.ps.add(f("variable"), "%q is not a variable name; want [A-Za-z_][A-Za-z0-9_]*", c.Variable)
		case strings.HasPrefix(c.Variable, "DSH_") || strings.HasPrefix(c.Variable, "LD_") || slices.Contains(egressVariables, strings.ToUpper(c.Variable)):
			cc.ps.add(f("variable"), "%q is reserved", c.Variable)
		case cc.vars[c.Variable]:
			cc.ps.add(f("variable"), "%q is used twice", c.Variable)
		}
		cc.vars[c.Variable] = true
	}
	switch {
	case (c.ValueEnv == "") == (c.ValueFile == ""):
		cc.ps.add(f("value"), "want exactly one of env (a variable of the service) and file (an operator-owned file)")
	case c.ValueEnv != "" && !portableName(c.ValueEnv):
		cc.ps.add(f("value.env"), "%q is not a variable name", c.ValueEnv)
	case c.ValueFile != "" && !absClean(c.ValueFile):
		cc.ps.add(f("value.file"), "%q is not an absolute, clean path", c.ValueFile)
	}
	if c.UpstreamCAFile != "" && !absClean(c.UpstreamCAFile) {
		cc.ps.add(f("upstreamCA"), "%q is not an absolute, clean path", c.UpstreamCAFile)
	}
}

// egressVariables are the variables the egress network sets in a call,
// which a credential's variable may not name.
var egressVariables = []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "GIT_SSL_CAINFO", "CURL_CA_BUNDLE"}

func absClean(p string) bool {
	return filepath.IsAbs(p) && filepath.Clean(p) == p && strings.IndexByte(p, 0) < 0
}

func credentialName(s string) bool {
	if len(s) == 0 || len(s) > 32 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// headerChar reports whether r may appear in an HTTP header name (an
// RFC 9110 token).
func headerChar(r rune) bool {
	return r < 0x7f && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", r))
}

// WithCABundle binds the call's CA bundle (egress.Setup.CABundle)
// read-only over egress.CABundlePath.
func WithCABundle(hostPath string) SpecOpt {
	return func(s *specs.Spec) error {
		s.Mounts = append(s.Mounts, specs.Mount{
			Destination: egress.CABundlePath, Type: "bind", Source: hostPath,
			Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"},
		})
		return nil
	}
}
