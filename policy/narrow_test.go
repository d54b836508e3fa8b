package policy

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestNarrow(t *testing.T) {
	base, ok := Builtin(WorkspaceWrite)
	if !ok {
		t.Fatal("no workspace-write profile")
	}
	loop := base
	loop.Network = "loopback"
	loop, err := Normalize(loop)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		p     sandbox.Policy
		n     Narrowing
		field string // refused naming this field; "" means allowed
		check func(t *testing.T, got sandbox.Policy)
	}{
		{name: "nothing asked keeps the policy", p: base, check: func(t *testing.T, got sandbox.Policy) {
			if got.Digest != base.Digest {
				t.Errorf("digest %s, want the policy's %s", got.Digest, base.Digest)
			}
		}},
		{name: "lower memory", p: base, n: Narrowing{MemoryBytes: 512 << 20}, check: func(t *testing.T, got sandbox.Policy) {
			if got.Limits.MemoryBytes != 512<<20 || got.Name != base.Name || got.Digest == base.Digest {
				t.Errorf("memory %d, name %q, digest %s; want 512Mi, the same name and a new digest", got.Limits.MemoryBytes, got.Name, got.Digest)
			}
		}},
		{name: "equal memory", p: base, n: Narrowing{MemoryBytes: base.Limits.MemoryBytes}},
		{name: "more memory", p: base, n: Narrowing{MemoryBytes: base.Limits.MemoryBytes + 1}, field: "memoryBytes"},
		{name: "memory below the minimum", p: base, n: Narrowing{MemoryBytes: 1 << 20}, field: "memoryBytes"},
		{name: "negative memory", p: base, n: Narrowing{MemoryBytes: -1}, field: "memoryBytes"},
		{name: "lower cpus", p: base, n: Narrowing{CPUs: 0.5}, check: func(t *testing.T, got sandbox.Policy) {
			if got.Limits.CPUs != 0.5 {
				t.Errorf("cpus %v, want 0.5", got.Limits.CPUs)
			}
		}},
		{name: "more cpus", p: base, n: Narrowing{CPUs: base.Limits.CPUs * 2}, field: "cpus"},
		{name: "NaN cpus", p: base, n: Narrowing{CPUs: math.NaN()}, field: "cpus"},
		{name: "negative cpus", p: base, n: Narrowing{CPUs: -1}, field: "cpus"},
		{name: "lower pids", p: base, n: Narrowing{Pids: 64}, check: func(t *testing.T, got sandbox.Policy) {
			if got.Limits.Pids != 64 {
				t.Errorf("pids %d, want 64", got.Limits.Pids)
			}
		}},
		{name: "more pids", p: base, n: Narrowing{Pids: base.Limits.Pids + 1}, field: "pids"},
		{name: "negative pids", p: base, n: Narrowing{Pids: -5}, field: "pids"},
		{name: "timeout within the maximum", p: base, n: Narrowing{TimeoutMs: 30000}, check: func(t *testing.T, got sandbox.Policy) {
			if got.Limits.TimeoutMs != 30000 || got.Limits.MaxTimeoutMs != base.Limits.MaxTimeoutMs {
				t.Errorf("timeout %d, max %d; want 30000 and the policy's max", got.Limits.TimeoutMs, got.Limits.MaxTimeoutMs)
			}
		}},
		{name: "timeout above the maximum", p: base, n: Narrowing{TimeoutMs: base.Limits.MaxTimeoutMs + 1}, field: "timeoutMs"},
		{name: "negative timeout", p: base, n: Narrowing{TimeoutMs: -1}, field: "timeoutMs"},
		{name: "network none under none", p: base, n: Narrowing{Network: "none"}},
		{name: "network loopback under none", p: base, n: Narrowing{Network: "loopback"}, field: "network"},
		{name: "network none under loopback", p: loop, n: Narrowing{Network: "none"}, check: func(t *testing.T, got sandbox.Policy) {
			if got.Network != "none" {
				t.Errorf("network %q, want none", got.Network)
			}
		}},
		{name: "network loopback under loopback", p: loop, n: Narrowing{Network: "loopback"}},
		{name: "unknown network", p: loop, n: Narrowing{Network: "host"}, field: "network"},
		{name: "a mount without mountRoots", p: base, n: Narrowing{Mounts: []sandbox.Mount{{Source: "/srv/data", Target: "/data", ReadOnly: true}}}, field: "mounts"},
		{name: "several at once", p: base, n: Narrowing{MemoryBytes: 256 << 20, CPUs: 0.25, Pids: 32, TimeoutMs: 5000, Network: "none"}, check: func(t *testing.T, got sandbox.Policy) {
			l := got.Limits
			if l.MemoryBytes != 256<<20 || l.CPUs != 0.25 || l.Pids != 32 || l.TimeoutMs != 5000 {
				t.Errorf("limits %+v", l)
			}
		}},
		{name: "the first refused field is named", p: base, n: Narrowing{MemoryBytes: 1 << 40, Pids: 1 << 20}, field: "memoryBytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.p.Digest
			got, err := Narrow(tc.p, tc.n)
			if tc.p.Digest != before {
				t.Fatal("Narrow modified its argument")
			}
			if tc.field != "" {
				var ne *NarrowError
				if !errors.As(err, &ne) || ne.Field != tc.field || !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
					t.Fatalf("Narrow = %v; want a NarrowError naming %s, invalid argument", err, tc.field)
				}
				return
			}
			if err != nil {
				t.Fatalf("Narrow: %v", err)
			}
			if verr := Validate(got); verr != nil {
				t.Errorf("narrowed policy is invalid: %v", verr)
			}
			if got.Limits.MemoryBytes > tc.p.Limits.MemoryBytes || got.Limits.CPUs > tc.p.Limits.CPUs ||
				got.Limits.Pids > tc.p.Limits.Pids || got.Limits.MaxTimeoutMs != tc.p.Limits.MaxTimeoutMs ||
				got.Network.Rank() > tc.p.Network.Rank() || len(got.Mounts) != len(tc.p.Mounts)+len(tc.n.Mounts) {
				t.Errorf("Narrow widened %+v to %+v", tc.p, got)
			}
			if tc.check != nil {
				tc.check(t, got)
			}
		})
	}
}

// TestNarrowNestedRootsCase: the nearest root holding a mount's source
// decides whether it may be read-write, whichever order the roots have.
func TestNarrowNestedRootsCase(t *testing.T) {
	for _, tc := range []struct {
		name  string
		roots string
		src   string
		ro    bool
		want  string // substring of the refusal; "" means allowed
	}{
		{"rw below a ro root nested in a rw root", "[{path: /srv/data, mode: rw}, {path: /srv/data/ref, mode: ro}]", "/srv/data/ref/a", false, "mountRoots /srv/data/ref is read-only"},
		{"same, roots listed the other way", "[{path: /srv/data/ref, mode: ro}, {path: /srv/data, mode: rw}]", "/srv/data/ref/a", false, "mountRoots /srv/data/ref is read-only"},
		{"ro below the nested ro root", "[{path: /srv/data, mode: rw}, {path: /srv/data/ref, mode: ro}]", "/srv/data/ref/a", true, ""},
		{"rw beside the nested ro root", "[{path: /srv/data, mode: rw}, {path: /srv/data/ref, mode: ro}]", "/srv/data/other", false, ""},
		{"rw below a rw root nested in a ro root", "[{path: /srv, mode: ro}, {path: /srv/data, mode: rw}]", "/srv/data/x", false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte("name: nested\nmountRoots: " + tc.roots + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			n := Narrowing{Mounts: []sandbox.Mount{{Source: tc.src, Target: "/m", ReadOnly: tc.ro}}}
			_, err = Narrow(p, n)
			var ne *NarrowError
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Narrow(%+v) = %v, want allowed", n.Mounts, err)
			case tc.want != "" && (!errors.As(err, &ne) || ne.Field != "mounts" || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Narrow(%+v) = %v, want a NarrowError for mounts containing %q", n.Mounts, err, tc.want)
			}
		})
	}
}
