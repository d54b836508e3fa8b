package egress

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// MaxRules bounds the entries of one allow or deny list.
const MaxRules = 256

// Verdicts of a Decision.
const (
	Allowed = "allowed"
	Denied  = "denied"
)

// rule is one parsed entry of an allow or deny list: a host name, a
// "*." wildcard (any name below suffix, not suffix itself) or an address
// prefix (a single IP is a /32 or /128), with a port (0: any port).
type rule struct {
	text   string
	name   string // lower-case, without a trailing dot
	suffix string // ".example.com" for "*.example.com"
	prefix netip.Prefix
	port   uint16
}

// Rules are the parsed allow and deny lists of a policy. The zero value
// allows nothing. Rules are immutable and safe for concurrent use.
type Rules struct {
	allow, deny []rule
}

// ParseRule checks one entry of an allow or deny list: a host name
// ("api.example.com"), a wildcard ("*.example.com", names below it), an
// IP address ("10.0.0.5", "fd00::1") or CIDR ("10.0.0.0/8"), each with an
// optional port (":5432"; an IPv6 address with a port is written
// "[fd00::1]:5432"). It returns an error saying what is wrong.
func ParseRule(s string) error {
	_, err := parseRule(s)
	return err
}

// ParseRules parses the allow and deny lists of a policy (see ParseRule).
// The error names the first bad entry as "allow[i]" or "deny[i]".
func ParseRules(allow, deny []string) (*Rules, error) {
	r := &Rules{}
	for _, l := range []struct {
		name string
		in   []string
		out  *[]rule
	}{{"allow", allow, &r.allow}, {"deny", deny, &r.deny}} {
		if len(l.in) > MaxRules {
			return nil, fmt.Errorf("%s: %d entries; the limit is %d", l.name, len(l.in), MaxRules)
		}
		for i, s := range l.in {
			ru, err := parseRule(s)
			if err != nil {
				return nil, fmt.Errorf("%s[%d]: %w", l.name, i, err)
			}
			*l.out = append(*l.out, ru)
		}
	}
	return r, nil
}

func parseRule(s string) (rule, error) {
	r := rule{text: s}
	host := s
	if len(s) > 300 {
		return r, fmt.Errorf("%.40q… is longer than 300 bytes", s)
	}
	// A port follows the last ':' of "host:port" or "[v6]:port"; a bare
	// IPv6 address has several colons and no port.
	if h, p, ok := strings.Cut(s, "]:"); ok && strings.HasPrefix(h, "[") {
		host = h[1:]
		port, err := parsePort(p)
		if err != nil {
			return r, fmt.Errorf("%q: %w", s, err)
		}
		r.port = port
	} else if strings.Count(s, ":") == 1 {
		h, p, _ := strings.Cut(s, ":")
		port, err := parsePort(p)
		if err != nil {
			return r, fmt.Errorf("%q: %w", s, err)
		}
		host, r.port = h, port
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if pf, err := netip.ParsePrefix(host); err == nil {
		if pf.Addr().Zone() != "" {
			return r, fmt.Errorf("%q: an address with a zone is not allowed", s)
		}
		if pf.Addr().Is4In6() && pf.Bits() < 96 {
			return r, fmt.Errorf("%q: an IPv4-mapped CIDR (::ffff:a.b.c.d/n) needs n of at least 96", s)
		}
		r.prefix = netip.PrefixFrom(pf.Addr().Unmap(), pf.Bits()-unmapBits(pf.Addr())).Masked()
		if !r.prefix.IsValid() {
			return r, fmt.Errorf("%q is not a valid CIDR", s)
		}
		return r, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return r, fmt.Errorf("%q: an address with a zone is not allowed", s)
		}
		a = a.Unmap()
		r.prefix = netip.PrefixFrom(a, a.BitLen())
		return r, nil
	}
	if strings.ContainsAny(host, "/:[]") {
		return r, fmt.Errorf("%q is not a host name, *.name, IP address or CIDR with an optional :port", s)
	}
	name := strings.ToLower(strings.TrimSuffix(host, "."))
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		if err := checkName(rest); err != nil {
			return r, fmt.Errorf("%q: %w", s, err)
		}
		if !strings.Contains(rest, ".") {
			return r, fmt.Errorf("%q: a wildcard needs at least two labels after \"*.\" (\"*.example.com\")", s)
		}
		r.suffix = "." + rest
		return r, nil
	}
	if err := checkName(name); err != nil {
		return r, fmt.Errorf("%q: %w", s, err)
	}
	r.name = name
	return r, nil
}

// unmapBits is how many bits an IPv4-mapped IPv6 prefix loses when it is
// written as IPv4.
func unmapBits(a netip.Addr) int {
	if a.Is4In6() {
		return 96
	}
	return 0
}

func parsePort(p string) (uint16, error) {
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	return uint16(n), nil
}

// checkName accepts a DNS name of letters, digits, '-' and '_' in labels
// of 1 to 63 bytes separated by dots, at most 253 bytes in all.
func checkName(name string) error {
	if name == "" || len(name) > 253 {
		return fmt.Errorf("a host name must be 1 to 253 bytes")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("the labels of a host name must be 1 to 63 bytes")
		}
		for _, c := range []byte(label) {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("a host name may hold only letters, digits, '-', '_' and dots")
			}
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("a label of a host name may not start or end with '-'")
		}
	}
	return nil
}

// portMatches compares a rule's port with the port asked for; port 0
// (a DNS question, which has no port) matches an allow entry of any port
// but only a deny entry without a port.
func (r rule) portMatches(port uint16, deny bool) bool {
	switch {
	case r.port == 0:
		return true
	case port == 0:
		return !deny
	}
	return r.port == port
}

func (r rule) matchName(name string, port uint16, deny bool) bool {
	if !r.portMatches(port, deny) {
		return false
	}
	switch {
	case r.name != "":
		return r.name == name
	case r.suffix != "":
		return strings.HasSuffix(name, r.suffix)
	}
	return false
}

func (r rule) matchAddr(a netip.Addr, port uint16, deny bool) bool {
	return r.prefix.IsValid() && r.portMatches(port, deny) && r.prefix.Contains(a)
}

// NormalizeHost returns the name or address of host as the rules compare
// it: lower case, no trailing dot, an IPv4-mapped address as IPv4.
// isAddr is true for an IP literal.
func NormalizeHost(host string) (norm string, addr netip.Addr, isAddr bool) {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(h); err == nil && a.Zone() == "" {
		a = a.Unmap()
		return a.String(), a, true
	}
	return strings.ToLower(strings.TrimSuffix(host, ".")), netip.Addr{}, false
}

// Decision is the verdict on a host and port before resolution: Allowed
// or Denied, with the reason (the rule that decided, or why none did).
type Decision struct {
	Verdict string
	Reason  string
}

// CheckHost decides on a host (a name or an IP literal) and port before
// any name is resolved: a deny entry that matches wins; a name must match
// an allow name or wildcard; an IP literal must lie in an allow address
// or CIDR. An allowed name still needs CheckAddr for each address it
// resolves to. Port 0 asks about any port (a DNS question): an allow
// entry of any port matches, a deny entry only when it has no port.
func (r *Rules) CheckHost(host string, port uint16) Decision {
	h, a, isAddr := NormalizeHost(host)
	match := func(ru rule, deny bool) bool { return ru.matchName(h, port, deny) }
	none := "no allow entry matches"
	switch {
	case isAddr:
		match = func(ru rule, deny bool) bool { return ru.matchAddr(a, port, deny) }
		none = "an IP address that no allow entry lists"
	case checkName(h) != nil:
		return Decision{Denied, "not a valid host name"}
	}
	if d, ok := first(r.deny, match, true); ok {
		return Decision{Denied, "deny entry " + strconv.Quote(d.text)}
	}
	if al, ok := first(r.allow, match, false); ok {
		return Decision{Allowed, "allow entry " + strconv.Quote(al.text)}
	}
	return Decision{Denied, none}
}

// first returns the first rule of rs that match accepts.
func first(rs []rule, match func(ru rule, deny bool) bool, deny bool) (rule, bool) {
	for _, ru := range rs {
		if match(ru, deny) {
			return ru, true
		}
	}
	return rule{}, false
}

// CheckAddr decides on one address a name resolved to (or an IP literal
// asked for directly): a deny address or CIDR that contains it wins; an
// address in a special range (SpecialRange: private, loopback,
// link-local, CGNAT, metadata, multicast, …) is refused unless an allow
// address or CIDR that names that range, or a narrower one inside it,
// contains it: a wider entry such as 0.0.0.0/0 or ::/0 never reaches a
// special range. A NAT64 or 6to4 address whose embedded IPv4 address is
// special needs that too, for the embedded address. Any other address is
// allowed.
func (r *Rules) CheckAddr(a netip.Addr, port uint16) Decision {
	a = a.Unmap()
	match := func(ru rule, deny bool) bool { return ru.matchAddr(a, port, deny) }
	if d, ok := first(r.deny, match, true); ok {
		return Decision{Denied, "address " + a.String() + " is in deny entry " + strconv.Quote(d.text)}
	}
	ranges := specialRanges(a)
	if len(ranges) == 0 {
		return Decision{Allowed, "public address " + a.String()}
	}
	var names []string
	for _, sr := range ranges {
		al, ok := first(r.allow, func(ru rule, deny bool) bool { return ru.portMatches(port, deny) && sr.reachedBy(ru) }, false)
		if !ok {
			why := sr.addr.String() + " is " + sr.kind + " (" + sr.prefix.String() + ")"
			if sr.addr != a {
				why = a.String() + " embeds " + why
			}
			why = "address " + why + "; only an allow entry naming that range or a narrower one inside it reaches it"
			if wide, ok := first(r.allow, func(ru rule, deny bool) bool { return ru.matchAddr(sr.addr, port, deny) }, false); ok {
				why += " (allow entry " + strconv.Quote(wide.text) + " is wider)"
			}
			return Decision{Denied, why}
		}
		names = append(names, strconv.Quote(al.text))
	}
	return Decision{Allowed, "address " + a.String() + " is " + ranges[0].kind + " named by allow entry " + strings.Join(names, " and ")}
}

// namesAddr reports whether an allow entry is the address a itself (a
// /32 or /128) for port.
func (r *Rules) namesAddr(a netip.Addr, port uint16) bool {
	a = a.Unmap()
	_, ok := first(r.allow, func(ru rule, deny bool) bool {
		return ru.matchAddr(a, port, deny) && ru.prefix.Bits() == a.BitLen()
	}, false)
	return ok
}

// specialRange is one special range an address lies in; addr is the
// address in it (the IPv4 address a NAT64 or 6to4 address embeds, else
// the address itself).
type specialRange struct {
	prefix netip.Prefix
	kind   string
	addr   netip.Addr
}

// reachedBy reports whether the allow entry ru names the range, or a
// narrower one inside it, and contains the address.
func (sr specialRange) reachedBy(ru rule) bool {
	return ru.prefix.IsValid() && ru.prefix.Bits() >= sr.prefix.Bits() &&
		sr.prefix.Contains(ru.prefix.Addr()) && ru.prefix.Contains(sr.addr)
}

// specialRanges lists the special ranges a (unmapped) lies in: the
// narrowest of special that contains it and, for a NAT64 (64:ff9b::/96)
// or 6to4 (2002::/16) address, the narrowest its embedded IPv4 address
// lies in.
func specialRanges(a netip.Addr) []specialRange {
	var out []specialRange
	if sr, ok := narrowestSpecial(a); ok {
		out = append(out, sr)
	}
	if v4, ok := embeddedIPv4(a); ok {
		if sr, ok := narrowestSpecial(v4); ok {
			out = append(out, sr)
		}
	}
	return out
}

func narrowestSpecial(a netip.Addr) (specialRange, bool) {
	var best specialRange
	for _, s := range special {
		if s.prefix.Contains(a) && (!best.prefix.IsValid() || s.prefix.Bits() > best.prefix.Bits()) {
			best = specialRange{prefix: s.prefix, kind: s.kind, addr: a}
		}
	}
	return best, best.prefix.IsValid()
}

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
)

// embeddedIPv4 is the IPv4 address a NAT64 (64:ff9b::/96: the last 32
// bits) or 6to4 (2002::/16: the 32 bits after the prefix) address
// carries.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	switch {
	case !a.Is6():
		return netip.Addr{}, false
	case nat64.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

// special are the ranges no name may resolve to unless an allow entry
// names the range or a narrower one inside it: what is not the public
// internet. Where they nest, the narrowest applies (a metadata address
// needs an entry naming it, not the link-local range).
var special = []struct {
	prefix netip.Prefix
	kind   string
}{
	{netip.MustParsePrefix("169.254.169.254/32"), "a cloud metadata address"},
	{netip.MustParsePrefix("100.100.100.200/32"), "a cloud metadata address"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "a cloud metadata address"},
	{netip.MustParsePrefix("fd20:ce::254/128"), "a cloud metadata address"},
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a CGNAT address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "a reserved address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("::ffff:0:0/96"), "an IPv4-mapped address"},
	{netip.MustParsePrefix("64:ff9b::/96"), "a NAT64 address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a NAT64 address"},
	{netip.MustParsePrefix("100::/64"), "a discard address"},
	{netip.MustParsePrefix("2001::/32"), "a Teredo address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("2002::/16"), "a 6to4 address"},
	{netip.MustParsePrefix("fc00::/7"), "a private address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// SpecialRange names the kind of the narrowest special range a lies in
// ("a private address", "a cloud metadata address", …), or "" for a
// public address.
func SpecialRange(a netip.Addr) string {
	a = a.Unmap()
	if !a.IsValid() {
		return "an invalid address"
	}
	sr, _ := narrowestSpecial(a)
	return sr.kind
}

// SpecialReach explains, for policy check, how each allow address or
// CIDR meets the special ranges: which one it lies inside (and so
// reaches), and which ones lie inside it without being reached (it is
// wider than they are). One line per entry that meets any.
func (r *Rules) SpecialReach() []string {
	var lines []string
	for _, ru := range r.allow {
		if !ru.prefix.IsValid() {
			continue
		}
		if sr, ok := narrowestSpecial(ru.prefix.Addr()); ok && sr.reachedBy(ru) {
			lines = append(lines, fmt.Sprintf("allow entry %q reaches %s (in %s, %s)", ru.text, ru.prefix, sr.prefix, sr.kind))
			continue
		}
		var wider []string
		for _, s := range special {
			if s.prefix.Bits() > ru.prefix.Bits() && ru.prefix.Contains(s.prefix.Addr()) {
				wider = append(wider, s.prefix.String())
			}
		}
		if len(wider) > 0 {
			lines = append(lines, fmt.Sprintf("allow entry %q is wider than, and does not reach, the special ranges %s (name a range, or a narrower one inside it, to reach it)", ru.text, strings.Join(wider, ", ")))
		}
	}
	return lines
}

// Allow and Deny return the entries as written, for explanations.
func (r *Rules) Allow() []string { return texts(r.allow) }

// Deny returns the deny entries as written.
func (r *Rules) Deny() []string { return texts(r.deny) }

func texts(rs []rule) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.text
	}
	return out
}
