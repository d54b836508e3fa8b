package policy

import (
	"errors"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

const allowlistYAML = `
name: egress
network:
  mode: allowlist
  allow: ["api.example.com", "*.githubusercontent.com", "10.0.0.5:5432"]
  deny: [bad.githubusercontent.com]
`

func TestParseNetwork(t *testing.T) {
	for _, tc := range []struct {
		doc       string
		mode      string
		allow     []string
		wantErr   string
		noDigestΔ bool // the digest of the same policy without the key
	}{
		{doc: "network: none", mode: "none", noDigestΔ: true},
		{doc: "network: loopback", mode: "loopback"},
		{doc: "network: {mode: loopback}", mode: "loopback"},
		{doc: allowlistYAML, mode: string(NetworkAllowlist), allow: []string{"api.example.com", "*.githubusercontent.com", "10.0.0.5:5432"}},
		{doc: "network: {mode: allowlist}", mode: string(NetworkAllowlist)},
		{doc: "network: allowlist", mode: string(NetworkAllowlist)},
		{doc: "network: {allow: [a.example.com]}", wantErr: "network.mode: is missing"},
		{doc: "network: {mode: loopback, allow: [a.example.com]}", wantErr: "need mode \"allowlist\""},
		{doc: "network: {mode: allowlist, allow: [\"http://x\"]}", wantErr: "network.allow[0]: "},
		{doc: "network: {mode: allowlist, deny: [ok.example.com, \"a b\"]}", wantErr: "network.deny[1]: "},
		{doc: "network: {mode: allowlist, allow: a.example.com}", wantErr: "network.allow: is a string; want a list"},
		{doc: "network: {mode: allowlist, alow: [a.example.com]}", wantErr: "network.alow: unknown field"},
		{doc: "network: [none]", wantErr: "network: is a list; want a mapping"},
		{doc: "network: open", wantErr: "network: \"open\" is not allowed"},
		{doc: "backend: local\nnetwork: {mode: allowlist}", wantErr: "not supported by backend local"},
	} {
		p, err := Parse([]byte(tc.doc))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, sandbox.ErrInvalid) {
				t.Errorf("Parse(%q) = %v, want an invalid-argument error containing %q", tc.doc, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("Parse(%q) = %v", tc.doc, err)
			continue
		}
		if string(p.Network) != tc.mode || strings.Join(p.NetworkAllow, ",") != strings.Join(tc.allow, ",") {
			t.Errorf("Parse(%q) = network %q allow %q, want %q %q", tc.doc, p.Network, p.NetworkAllow, tc.mode, tc.allow)
		}
		if tc.noDigestΔ {
			q, _ := Parse([]byte("name: custom"))
			if p.Digest != q.Digest {
				t.Errorf("Parse(%q): digest %s differs from the same policy without the key (%s)", tc.doc, p.Digest, q.Digest)
			}
		}
	}
}

func TestFormatNetworkRoundTrip(t *testing.T) {
	for _, doc := range []string{allowlistYAML, "network: loopback", "network: {mode: allowlist}"} {
		p, err := Parse([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		out, err := Format(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Format(%q)) = %v\n%s", doc, err, out)
		}
		if q.Digest != p.Digest {
			t.Errorf("Parse(Format(%q)) digest %s, want %s\n%s", doc, q.Digest, p.Digest, out)
		}
		if p.Network != NetworkAllowlist && !strings.Contains(string(out), `"network": "`+string(p.Network)+`"`) {
			t.Errorf("Format wrote network %q not as a string:\n%s", p.Network, out)
		}
	}
}

func TestNarrowNetwork(t *testing.T) {
	p, err := Parse([]byte(allowlistYAML))
	if err != nil {
		t.Fatal(err)
	}
	q, err := Narrow(p, Narrowing{Network: "loopback"})
	if err != nil || q.Network != "loopback" || q.NetworkAllow != nil || q.NetworkDeny != nil {
		t.Errorf("Narrow(allowlist, loopback) = %q %q %q, %v; want loopback without lists", q.Network, q.NetworkAllow, q.NetworkDeny, err)
	}
	q, err = Narrow(p, Narrowing{Network: NetworkAllowlist})
	if err != nil || q.Digest != p.Digest {
		t.Errorf("Narrow(allowlist, allowlist) = %v, %v; want the policy unchanged", q.Digest, err)
	}
	lo, _ := Parse([]byte("network: loopback"))
	var ne *NarrowError
	if _, err := Narrow(lo, Narrowing{Network: NetworkAllowlist}); !errors.As(err, &ne) || ne.Field != "network" {
		t.Errorf("Narrow(loopback, allowlist) = %v, want a refusal naming network", err)
	}
}

func TestExplainAllowlist(t *testing.T) {
	p, err := Parse([]byte(allowlistYAML))
	if err != nil {
		t.Fatal(err)
	}
	checkGolden(t, "explain-allowlist", Explain(p))
	// A wide prefix: policy check says which special ranges it does
	// not reach.
	p, err = Parse([]byte("network: {mode: allowlist, allow: [\"0.0.0.0/0\", \"::/0\", \"169.254.169.254\"]}"))
	if err != nil {
		t.Fatal(err)
	}
	got := Explain(p)
	for _, want := range []string{`allow entry "0.0.0.0/0" is wider than, and does not reach, the special ranges 169.254.169.254/32, 100.100.100.200/32, 0.0.0.0/8, 10.0.0.0/8`, `allow entry "::/0" is wider than, and does not reach, the special ranges fd00:ec2::254/128, fd20:ce::254/128`, `allow entry "169.254.169.254" reaches 169.254.169.254/32 (in 169.254.169.254/32, a cloud metadata address)`} {
		if !strings.Contains(got, want) {
			t.Errorf("Explain(allow 0.0.0.0/0, ::/0, 169.254.169.254) lacks %q:\n%s", want, got)
		}
	}
}

func TestWithNetworkNamespace(t *testing.T) {
	s := BaseSpec("rootfs", nil)
	for _, o := range []SpecOpt{WithNamespaces(), WithNetworkNamespace("/proc/1/fd/7"), WithNetworkFiles("/state/egress", true)} {
		if err := o(s); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.NetworkNamespace {
			n++
			if ns.Path != "/proc/1/fd/7" {
				t.Errorf("network namespace path = %q, want /proc/1/fd/7", ns.Path)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d network namespaces, want 1", n)
	}
	var sys, nss bool
	for _, m := range s.Mounts {
		switch m.Destination {
		case "/sys":
			sys = m.Type == "tmpfs"
		case "/etc/nsswitch.conf":
			nss = m.Source == "/state/egress/nsswitch.conf" && strings.Contains(strings.Join(m.Options, ","), "ro")
		}
	}
	if !sys || !nss {
		t.Errorf("mounts %+v: want /sys a tmpfs and /etc/nsswitch.conf bound read-only", s.Mounts)
	}
	if err := WithNetworkNamespace("")(BaseSpec("rootfs", nil)); err == nil {
		t.Errorf("WithNetworkNamespace(\"\") = nil, want an error")
	}
}
