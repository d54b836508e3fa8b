package egress

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// testNets are two network namespaces the test makes with ip netns:
// "host", from which the proxy dials (it stands for the service's host:
// its addresses are the host's own), and "net", joined to it by a veth
// pair, which holds the addresses the call tries to reach, each with a
// server on port 80 that answers its own address.
type testNets struct {
	host, net string // names under /var/run/netns
}

// Addresses of the test networks.
const (
	hostOwn4 = "93.184.216.99" // the host's own, public
	hostOwn6 = "2606:4700::99" // the host's own, public
	public4  = "93.184.216.34" // a public address in "net"
	public6  = "2606:4700::1111"
)

// netTargets are the addresses of "net": every special kind the issue
// names, and public ones.
var netTargets = []string{"169.254.169.254", "10.0.0.1", "172.16.0.1", "192.168.0.1", "100.64.0.1", "169.254.1.1",
	"fd00::1", "fd00:ec2::254", public4, public6}

func ipCmd(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func newTestNets(t testing.TB) *testNets {
	t.Helper()
	requireRoot(t)
	if _, err := exec.LookPath("ip"); err != nil {
		t.Fatalf("the special-range test needs ip (iproute2): %v", err)
	}
	n := &testNets{host: fmt.Sprintf("dsh-egress-h%d", os.Getpid()), net: fmt.Sprintf("dsh-egress-n%d", os.Getpid())}
	for _, ns := range []string{n.host, n.net} {
		ipCmd(t, "netns", "add", ns)
		t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	}
	h, x := []string{"-n", n.host}, []string{"-n", n.net}
	ipCmd(t, append(h, "link", "add", "vh", "type", "veth", "peer", "name", "vn", "netns", n.net)...)
	for _, a := range [][]string{
		append(h, "link", "set", "lo", "up"), append(h, "link", "set", "vh", "up"),
		append(x, "link", "set", "lo", "up"), append(x, "link", "set", "vn", "up"),
		append(h, "addr", "add", hostOwn4+"/32", "dev", "vh"),
		append(h, "-6", "addr", "add", hostOwn6+"/128", "dev", "vh", "nodad"),
		append(h, "route", "add", "default", "dev", "vh"),
		append(h, "-6", "route", "add", "default", "dev", "vh"),
		append(x, "route", "add", "default", "dev", "vn"),
		append(x, "-6", "route", "add", "default", "dev", "vn"),
	} {
		ipCmd(t, a...)
	}
	for _, a := range netTargets {
		if strings.Contains(a, ":") {
			ipCmd(t, append(x, "-6", "addr", "add", a+"/128", "dev", "vn", "nodad")...)
		} else {
			ipCmd(t, append(x, "addr", "add", a+"/32", "dev", "vn")...)
		}
	}
	// Servers answering their own address: every target in "net", the
	// host's own addresses and its loopback in "host".
	for ns, addrs := range map[string][]string{n.net: netTargets, n.host: {hostOwn4, hostOwn6, "127.0.0.1", "::1"}} {
		for _, a := range addrs {
			ln, err := listenIn(ns, net.JoinHostPort(a, "80"))
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "here is "+a) })}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
		}
	}
	return n
}

// inNetns runs f on a thread of its own in the namespace named ns; the
// thread ends with f.
func inNetns(ns string, f func() error) error {
	return joinNamespace("/var/run/netns/"+ns, f)
}

func listenIn(ns, addr string) (ln net.Listener, err error) {
	err = inNetns(ns, func() error {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// network is how the proxy reaches out from "host": names resolve as
// names says, every dial and the list of the host's addresses happen in
// "host".
func (n *testNets) network(names map[string]string) Network {
	return Network{
		LookupNetIP: func(_ context.Context, host string) ([]netip.Addr, error) {
			if a, ok := names[host]; ok {
				return []netip.Addr{netip.MustParseAddr(a)}, nil
			}
			return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
		},
		DialContext: func(ctx context.Context, network, addr string) (c net.Conn, err error) {
			err = inNetns(n.host, func() error {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
		InterfaceAddrs: func() (own []netip.Addr, err error) {
			err = inNetns(n.host, func() error {
				own, err = interfaceAddrs()
				return err
			})
			return own, err
		},
	}
}

// TestSpecialRangesInNamespaces: under allow 0.0.0.0/0 and ::/0, a call
// reaches the public addresses of a network the test made and none of
// its metadata, private, CGNAT, link-local or ULA addresses, nor the
// host's own addresses or loopback, by address or by name; with entries
// naming those ranges (or the address, for the host's own), it reaches
// each of them, so the servers were there to reach.
func TestSpecialRangesInNamespaces(t *testing.T) {
	n := newTestNets(t)
	special := []string{"169.254.169.254", "10.0.0.1", "172.16.0.1", "192.168.0.1", "100.64.0.1", "169.254.1.1",
		"fd00::1", "fd00:ec2::254", hostOwn4, hostOwn6, "127.0.0.1", "::1", "::ffff:169.254.169.254", "::ffff:10.0.0.1",
		"meta.test", "private.test", "ula.test", "own.test", "loop.test"}
	public := []string{public4, public6, "public.test"}
	naming := []string{"169.254.169.254", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16",
		"fd00::/8", "fd00:ec2::254", hostOwn4, hostOwn6, "127.0.0.1", "::1", "meta.test", "private.test", "ula.test", "own.test", "loop.test", "public.test", public4, public6}
	for _, tc := range []struct {
		name  string
		allow []string
	}{
		{"wide", []string{"0.0.0.0/0", "::/0", "meta.test", "private.test", "ula.test", "own.test", "loop.test", "public.test"}},
		{"naming", naming},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Start(Options{Allow: tc.allow, Network: n.network(map[string]string{"meta.test": "169.254.169.254", "private.test": "10.0.0.1", "ula.test": "fd00::1",
				"own.test": hostOwn4, "loop.test": "127.0.0.1", "public.test": public4})})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, target := range append(append([]string{}, special...), public...) {
				want := tc.name == "naming" || !slices.Contains(special, target)
				addr := net.JoinHostPort(target, "80")
				conn, br, code := connect(t, c, addr)
				got := code == http.StatusOK
				if got {
					fmt.Fprintf(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
					resp, err := http.ReadResponse(br, nil)
					if err != nil {
						t.Errorf("%s: GET %s through the tunnel: %v", tc.name, addr, err)
					} else {
						resp.Body.Close()
					}
				}
				conn.Close()
				if got != want {
					t.Errorf("%s (allow %q): CONNECT %s = %d, want reached %v", tc.name, tc.allow, addr, code, want)
				}
			}
			recs := c.Close()
			var denied int
			for _, r := range recs {
				if r.Verdict == Denied {
					denied++
					if tc.name == "wide" && !strings.Contains(r.Reason, "only an allow entry") {
						t.Errorf("wide: refusal of %s:%d says %q, want it to say which entry would reach it", r.Host, r.Port, r.Reason)
					}
				}
			}
			if want := map[string]int{"wide": len(special), "naming": 0}[tc.name]; denied != want {
				t.Errorf("%s: %d refusals recorded, want %d: %+v", tc.name, denied, want, recs)
			}
		})
	}
}
