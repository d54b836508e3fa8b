package egress

import (
	"context"
	"strings"

	"github.com/miekg/dns"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// dnsTTL is the time to live of every answer, in seconds: short, so that
// a client asks again rather than keep an address the proxy forgot.
const dnsTTL = 5

// maxLearned bounds the addresses one call's DNS server remembers; a
// client that connects to an address it was not given is refused like
// any unlisted IP address.
const maxLearned = 4096

// maxDNSInFlight bounds the questions one call's DNS server answers at
// once (over UDP and TCP); one more gets SERVFAIL at once.
const maxDNSInFlight = 64

// ServeDNS answers A and AAAA questions for names the rules allow with
// the addresses the rules allow, and remembers them, so that a client
// that resolves first and then asks the proxy for the address is treated
// as asking for the name. A name no allow entry matches, or one whose
// addresses are all refused, gets NXDOMAIN; other question types of an
// allowed name get an empty answer. Refusals are recorded with port 0.
// A question over maxDNSInFlight gets SERVFAIL.
func (p *proxy) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	m.RecursionAvailable = true
	select {
	case p.dnsSlots <- struct{}{}:
		defer func() { <-p.dnsSlots }()
	default:
		m.Rcode = dns.RcodeServerFailure
		_ = w.WriteMsg(m)
		return
	}
	if q.Opcode != dns.OpcodeQuery || len(q.Question) != 1 {
		m.Rcode = dns.RcodeRefused
		_ = w.WriteMsg(m)
		return
	}
	question := q.Question[0]
	name := strings.ToLower(strings.TrimSuffix(question.Name, "."))
	refuse := func(reason string) {
		p.record(sandbox.Connection{Host: name, Verdict: Denied, Reason: "DNS: " + reason})
		m.Rcode = dns.RcodeNameError
		_ = w.WriteMsg(m)
	}
	if _, _, isAddr := NormalizeHost(name); isAddr {
		refuse("not a host name")
		return
	}
	if d := p.rules.CheckHost(name, 0); d.Verdict != Allowed {
		refuse(d.Reason)
		return
	}
	if question.Qclass != dns.ClassINET || (question.Qtype != dns.TypeA && question.Qtype != dns.TypeAAAA) {
		_ = w.WriteMsg(m) // NOERROR, no answer
		return
	}
	ctx, cancel := context.WithTimeout(p.ctx, dialTimeout)
	defer cancel()
	addrs, err := p.net.LookupNetIP(ctx, name)
	if err != nil {
		refuse("resolving " + name + " failed: " + dnsError(err))
		return
	}
	ok, why := p.filter(addrs, 0)
	if len(ok) == 0 {
		refuse(why)
		return
	}
	hdr := dns.RR_Header{Name: question.Name, Class: dns.ClassINET, Ttl: dnsTTL, Rrtype: question.Qtype}
	p.mu.Lock()
	for _, a := range ok {
		if len(p.learned) < maxLearned {
			p.learned[a] = name
		}
		switch {
		case a.Is4() && question.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: a.AsSlice()})
		case a.Is6() && question.Qtype == dns.TypeAAAA:
			m.Answer = append(m.Answer, &dns.AAAA{Hdr: hdr, AAAA: a.AsSlice()})
		}
	}
	p.mu.Unlock()
	_ = w.WriteMsg(m)
}
