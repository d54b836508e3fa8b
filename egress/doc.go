// Package egress is the network of a call whose policy says network
// "allowlist": the rules that decide which hosts a call may reach
// (Rules, pure and testable without a network), and, per call, a network
// namespace with only the loopback interface in which the service serves
// an HTTP proxy (CONNECT and plain HTTP), a SOCKS5 server (CONNECT) and a
// DNS server (Gateway). The call joins that namespace, or, on a runtime that
// cannot join one, the service serves in the call's own
// (Options.Namespace); its connections are served by goroutines of
// the service, which dial out from the host's namespace only to the
// addresses the rules allow, after resolving names themselves, so a name
// that resolves to a private address is refused (no DNS rebinding).
//
// It imports sandbox, an HTTP proxy library, a SOCKS5 library and a DNS
// library. Backends and policy may import it; sandbox never does.
package egress
