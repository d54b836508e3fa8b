package backend

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func open(context.Context, Config, sandbox.Runtime) (sandbox.Executor, error) { return nil, nil }

func TestRegistryTargetsCase(t *testing.T) {
	var r Registry
	r.Register(Descriptor{Name: "a", Runtimes: []sandbox.Runtime{"x", "y"}, Open: open, Reaps: true})
	r.Register(Descriptor{Name: "b", Open: open, Reaps: true})
	r.Register(Descriptor{Name: "c", Open: open, Explicit: true})
	reaps := func(d *Descriptor) bool { return d.Reaps }
	tests := []struct {
		name string
		keep func(*Descriptor) bool
		want []string
	}{
		{"all", nil, []string{"a/x", "a/y", "b", "c"}},
		{"reapers", reaps, []string{"a/x", "a/y", "b"}},
		{"none", func(*Descriptor) bool { return false }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, tg := range r.Targets(tt.keep) {
				got = append(got, tg.Label())
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Targets() = %q, want %q", got, tt.want)
			}
		})
	}
	if got := r.Names(reaps); !slices.Equal(got, []sandbox.Backend{"a", "b"}) {
		t.Errorf("Names(reaps) = %q, want [a b]", got)
	}
	r.Register(Descriptor{Name: "d", Runtimes: []sandbox.Runtime{"y", "z"}, Open: open})
	if got := r.Runtimes(); !slices.Equal(got, []sandbox.Runtime{"x", "y", "z"}) {
		t.Errorf("Runtimes() = %q, want [x y z]", got)
	}
	r.Unregister("d")
	if d, ok := r.Lookup("c"); !ok || !d.Explicit {
		t.Errorf("Lookup(c) = %+v, %v; want the explicit backend", d, ok)
	}
	if _, ok := r.Lookup("z"); ok {
		t.Errorf("Lookup(z) found an unregistered backend")
	}
	r.Unregister("b")
	if got := r.Names(nil); !slices.Equal(got, []sandbox.Backend{"a", "c"}) {
		t.Errorf("Names() after Unregister(b) = %q, want [a c]", got)
	}
}

func TestRegisterRefusesBadDescriptorsCase(t *testing.T) {
	tests := []struct {
		name string
		d    Descriptor
		want string
	}{
		{"no name", Descriptor{Open: open}, "needs a Name"},
		{"no open", Descriptor{Name: "b"}, "needs a Name and Open"},
		{"taken", Descriptor{Name: "a", Open: open}, "registered twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Registry
			r.Register(Descriptor{Name: "a", Open: open})
			defer func() {
				if msg, _ := recover().(string); !strings.Contains(msg, tt.want) {
					t.Errorf("Register(%+v) panicked with %q, want %q", tt.d, msg, tt.want)
				}
			}()
			r.Register(tt.d)
		})
	}
}
