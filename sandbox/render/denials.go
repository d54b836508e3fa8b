package render

import (
	"net"
	"strconv"
	"strings"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Denial is a host and port the call tried to reach and the egress
// policy denied, with the rule that decided and how many connections it
// denied there.
type Denial struct {
	Host   string
	Port   uint16
	Reason string
	Count  int
}

// Denials returns the denied connections of an egress record, one per
// host and port, in the order they were first tried. A call without
// denials returns nil.
func Denials(egress []sandbox.Connection) []Denial {
	var out []Denial
	at := map[string]int{}
	for _, c := range egress {
		if c.Verdict != "denied" {
			continue
		}
		key := hostPort(c.Host, c.Port)
		if i, ok := at[key]; ok {
			out[i].Count++
			continue
		}
		at[key] = len(out)
		out = append(out, Denial{Host: c.Host, Port: c.Port, Reason: c.Reason, Count: 1})
	}
	return out
}

func hostPort(host string, port uint16) string {
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// maxNamedDenials bounds the hosts a denial note names; the rest are
// counted.
const maxNamedDenials = 5

// DenialNote is the short model-facing note that ends a rendered result
// whose call had connections denied: "[network: the sandbox denied
// connections to HOST:PORT, …; a policy decision, not a network fault]",
// naming at most five hosts and counting the rest; "" without denials.
func DenialNote(egress []sandbox.Connection) string {
	d := Denials(egress)
	if len(d) == 0 {
		return ""
	}
	names := make([]string, 0, min(len(d), maxNamedDenials))
	for _, x := range d[:min(len(d), maxNamedDenials)] {
		names = append(names, hostPort(x.Host, x.Port))
	}
	list := strings.Join(names, ", ")
	if more := len(d) - len(names); more > 0 {
		list += " and " + strconv.Itoa(more) + " more"
	}
	return "[network: the sandbox denied connections to " + list + "; a policy decision, not a network fault]"
}
