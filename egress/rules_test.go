package egress

import (
	"net/netip"
	"strings"
	"testing"
)

func TestParseRule(t *testing.T) {
	for _, tc := range []struct {
		in      string
		wantErr string
	}{
		{"api.example.com", ""},
		{"API.Example.COM.", ""},
		{"*.githubusercontent.com", ""},
		{"api.example.com:443", ""},
		{"10.0.0.5", ""},
		{"10.0.0.5:5432", ""},
		{"10.0.0.0/8", ""},
		{"10.0.0.0/8:5432", ""},
		{"fd00::1", ""},
		{"[fd00::1]:5432", ""},
		{"fd00::/8", ""},
		{"localhost", ""},
		{"", "1 to 253"},
		{"*", "letters, digits"},
		{"*.com", "two labels"},
		{"a.*.com", "letters, digits"},
		{"api.example.com:0", "port"},
		{"api.example.com:65536", "port"},
		{"api.example.com:http", "port"},
		{"http://api.example.com", "port"},
		{"api.example.com/path", "not a host name"},
		{"-bad.example.com", "start or end"},
		{"fe80::1%eth0", "zone"},
		{"exa mple.com", "letters, digits"},
		{"exa\x00mple.com", "letters, digits"},
		{strings.Repeat("a", 64) + ".com", "1 to 63"},
		{strings.Repeat("a.", 200) + "com", "longer than 300"},
	} {
		err := ParseRule(tc.in)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("ParseRule(%q) = %v, want nil", tc.in, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("ParseRule(%q) = %v, want an error containing %q", tc.in, err, tc.wantErr)
		}
	}
}

func TestParseRulesNamesEntry(t *testing.T) {
	_, err := ParseRules([]string{"ok.example.com"}, []string{"x.example.com", "bad name"})
	if err == nil || !strings.HasPrefix(err.Error(), "deny[1]: ") {
		t.Errorf("ParseRules = %v, want an error starting with deny[1]", err)
	}
}

func TestCheckHost(t *testing.T) {
	r, err := ParseRules(
		[]string{"api.example.com", "*.cdn.example.com", "db.example.com:5432", "10.0.0.5:5432", "192.168.1.0/24", "[fd00::7]:443"},
		[]string{"bad.cdn.example.com", "192.168.1.13", "api.example.com:25"},
	)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host string
		port uint16
		want string
	}{
		{"api.example.com", 443, Allowed},
		{"API.EXAMPLE.COM.", 80, Allowed},
		{"api.example.com", 25, Denied},    // deny entry with that port
		{"api.example.com", 0, Allowed},    // DNS: a deny entry with a port does not deny the name
		{"x.api.example.com", 443, Denied}, // no wildcard for api
		{"a.cdn.example.com", 443, Allowed},
		{"a.b.cdn.example.com", 443, Allowed},
		{"cdn.example.com", 443, Denied}, // *.x matches below x only
		{"evilcdn.example.com", 443, Denied},
		{"bad.cdn.example.com", 443, Denied},
		{"bad.cdn.example.com", 0, Denied},
		{"db.example.com", 5432, Allowed},
		{"db.example.com", 5433, Denied},
		{"db.example.com", 0, Allowed},
		{"10.0.0.5", 5432, Allowed},
		{"10.0.0.5", 22, Denied},
		{"10.0.0.6", 5432, Denied},
		{"192.168.1.7", 80, Allowed},
		{"192.168.1.13", 80, Denied},
		{"::ffff:192.168.1.7", 80, Allowed},
		{"[fd00::7]", 443, Allowed},
		{"fd00::7", 80, Denied},
		{"93.184.216.34", 80, Denied}, // an IP only when listed
		{"169.254.169.254", 80, Denied},
		{"", 80, Denied},
		{"api.example.com/x", 80, Denied},
	} {
		if got := r.CheckHost(tc.host, tc.port); got.Verdict != tc.want {
			t.Errorf("CheckHost(%q, %d) = %+v, want %s", tc.host, tc.port, got, tc.want)
		}
	}
}

func TestCheckAddr(t *testing.T) {
	r, err := ParseRules([]string{"web.example.com", "10.0.0.5", "172.16.0.0/12:8080"}, []string{"93.184.216.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		port uint16
		want string
	}{
		{"8.8.8.8", 443, Allowed},
		{"2606:4700::1111", 443, Allowed},
		{"93.184.216.34", 443, Denied}, // deny CIDR
		{"10.0.0.5", 443, Allowed},     // listed explicitly
		{"10.0.0.6", 443, Denied},
		{"172.20.0.1", 8080, Allowed},
		{"172.20.0.1", 80, Denied},
		{"127.0.0.1", 80, Denied},
		{"127.1.2.3", 80, Denied},
		{"0.0.0.0", 80, Denied},
		{"169.254.169.254", 80, Denied},
		{"169.254.1.1", 80, Denied},
		{"100.64.0.1", 80, Denied},
		{"192.168.0.1", 80, Denied},
		{"224.0.0.1", 80, Denied},
		{"255.255.255.255", 80, Denied},
		{"::1", 80, Denied},
		{"::", 80, Denied},
		{"fd00:ec2::254", 80, Denied},
		{"fc00::1", 80, Denied},
		{"fe80::1", 80, Denied},
		{"ff02::1", 80, Denied},
		{"::ffff:127.0.0.1", 80, Denied},  // mapped loopback
		{"::ffff:10.0.0.5", 443, Allowed}, // mapped, listed
		{"64:ff9b::a00:1", 80, Denied},    // NAT64 of 10.0.0.1
		{"2002:a00:1::1", 80, Denied},     // 6to4 of 10.0.0.1
	} {
		if got := r.CheckAddr(netip.MustParseAddr(tc.addr), tc.port); got.Verdict != tc.want {
			t.Errorf("CheckAddr(%s, %d) = %+v, want %s", tc.addr, tc.port, got, tc.want)
		}
	}
}

func TestWithProxyEnv(t *testing.T) {
	got := WithProxyEnv([]string{"A=1", "HTTP_PROXY=http://evil:1", "https_proxy=x", "Z=2"})
	want := map[string]string{"A": "1", "Z": "2", "HTTP_PROXY": ProxyURL, "https_proxy": ProxyURL, "ALL_PROXY": SOCKSURL, "no_proxy": "localhost,127.0.0.1,::1"}
	seen := map[string]int{}
	for _, kv := range got {
		k, v, _ := strings.Cut(kv, "=")
		seen[k]++
		if w, ok := want[k]; ok && v != w {
			t.Errorf("WithProxyEnv: %s=%q, want %q", k, v, w)
		}
	}
	for k, n := range seen {
		if n != 1 {
			t.Errorf("WithProxyEnv: %s appears %d times", k, n)
		}
	}
	if len(got) != 2+8 {
		t.Errorf("WithProxyEnv = %q, want 10 entries", got)
	}
}

// TestParseRuleMappedCIDR: an IPv4-mapped CIDR shorter than /96 is
// refused (it has no IPv4 form and would match nothing); one of /96 or
// more is its IPv4 CIDR.
func TestParseRuleMappedCIDR(t *testing.T) {
	for _, s := range []string{"::ffff:0:0/95", "::ffff:10.0.0.0/8"} {
		if err := ParseRule(s); err == nil {
			t.Errorf("ParseRule(%q) = nil, want an error", s)
		}
	}
	r, err := ParseRules(nil, []string{"::ffff:10.0.0.0/104"})
	if err != nil {
		t.Fatal(err)
	}
	if d := r.CheckAddr(netip.MustParseAddr("10.1.2.3"), 80); d.Verdict != Denied || !strings.Contains(d.Reason, "deny entry") {
		t.Errorf("CheckAddr(10.1.2.3) under deny ::ffff:10.0.0.0/104 = %+v, want denied by the entry", d)
	}
}

// TestSpecialRangesNeedNarrowEntry: a special range is reached only
// through an allow entry naming it or a narrower range inside it, never
// through 0.0.0.0/0, ::/0 or another wider prefix; public addresses are
// reached through the wide entries.
func TestSpecialRangesNeedNarrowEntry(t *testing.T) {
	for _, tc := range []struct {
		allow []string
		addr  string
		want  string
	}{
		{[]string{"0.0.0.0/0", "::/0"}, "8.8.8.8", Allowed},
		{[]string{"0.0.0.0/0", "::/0"}, "2606:4700::1111", Allowed},
		{[]string{"0.0.0.0/0", "::/0"}, "169.254.169.254", Denied},
		{[]string{"0.0.0.0/0", "::/0"}, "100.100.100.200", Denied},
		{[]string{"0.0.0.0/0", "::/0"}, "10.1.2.3", Denied},
		{[]string{"0.0.0.0/0", "::/0"}, "172.16.0.1", Denied},
		{[]string{"0.0.0.0/0", "::/0"}, "192.168.1.1", Denied},
		{[]string{"0.0.0.0/0", "::/0"}, "100.64.0.1", Denied},
		{[]string{"0.0.0.0/0", "::/0"}, "127.0.0.1", Denied},
		{[]string{"0.0.0.0/0", "::/0"}, "169.254.1.1", Denied},
		{[]string{"0.0.0.0/0", "::/0"}, "::1", Denied},
		{[]string{"0.0.0.0/0", "::/0"}, "fd00::1", Denied},
		{[]string{"0.0.0.0/0", "::/0"}, "fd00:ec2::254", Denied},
		{[]string{"0.0.0.0/0", "::/0"}, "fd20:ce::254", Denied},
		{[]string{"0.0.0.0/0", "::/0"}, "fe80::1", Denied},
		{[]string{"0.0.0.0/0", "::/0"}, "::ffff:169.254.169.254", Denied},
		{[]string{"0.0.0.0/0", "::/0"}, "64:ff9b::a9fe:a9fe", Denied}, // NAT64 of the metadata address
		{[]string{"0.0.0.0/0", "::/0"}, "2002:a00:1::1", Denied},      // 6to4 of 10.0.0.1
		{[]string{"::ffff:0:0/96"}, "10.0.0.1", Denied},               // the mapped form of 0.0.0.0/0
		{[]string{"8.0.0.0/6"}, "10.0.0.1", Denied},                   // wider than 10.0.0.0/8
		{[]string{"fc00::/7"}, "fd00:ec2::254", Denied},               // the metadata address needs its own entry
		{[]string{"169.254.0.0/16"}, "169.254.169.254", Denied},
		{[]string{"169.254.0.0/16"}, "169.254.1.1", Allowed},
		{[]string{"169.254.169.254"}, "169.254.169.254", Allowed},
		{[]string{"10.0.0.0/8"}, "10.1.2.3", Allowed},
		{[]string{"10.1.0.0/16"}, "10.1.2.3", Allowed},
		{[]string{"::ffff:10.0.0.0/104"}, "::ffff:10.1.2.3", Allowed},
		{[]string{"fd00::/8"}, "fd00::1", Allowed},
		{[]string{"127.0.0.1"}, "127.0.0.1", Allowed},
		{[]string{"64:ff9b::/96"}, "64:ff9b::808:808", Allowed}, // NAT64 of a public address
		{[]string{"64:ff9b::/96"}, "64:ff9b::a00:1", Denied},    // NAT64 of 10.0.0.1: 10/8 not named
		{[]string{"64:ff9b::/96", "10.0.0.0/8"}, "64:ff9b::a00:1", Allowed},
	} {
		r, err := ParseRules(tc.allow, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := r.CheckAddr(netip.MustParseAddr(tc.addr), 80)
		if got.Verdict != tc.want {
			t.Errorf("allow %q: CheckAddr(%s) = %+v, want %s", tc.allow, tc.addr, got, tc.want)
		}
		if got.Verdict == Denied && len(tc.allow) > 0 && strings.HasSuffix(tc.allow[0], "/0") && !strings.Contains(got.Reason, "is wider") {
			t.Errorf("allow %q: CheckAddr(%s) reason %q, want it to name the wider entry", tc.allow, tc.addr, got.Reason)
		}
	}
}
