package policy

import (
	"errors"
	"reflect"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// FuzzParse checks that Parse never panics, that every error is an
// invalid-argument error, and that an accepted policy re-validates, is
// already normal, survives Format and Parse unchanged, and yields spec
// options. Seeds are in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			if !errors.Is(err, sandbox.ErrInvalid) {
				t.Fatalf("Parse(%q) error = %v, want it to wrap sandbox.ErrInvalid", data, err)
			}
			return
		}
		if err := Validate(p); err != nil {
			t.Fatalf("Validate(Parse(%q)) = %v, want nil", data, err)
		}
		n, err := Normalize(p)
		if err != nil || !reflect.DeepEqual(n, p) {
			t.Fatalf("Normalize(Parse(%q)) = %+v, %v, want %+v", data, n, err, p)
		}
		out, err := Format(p)
		if err != nil {
			t.Fatalf("Format(Parse(%q)) error = %v", data, err)
		}
		back, err := Parse(out)
		if err != nil || !reflect.DeepEqual(back, p) {
			t.Fatalf("Parse(Format(Parse(%q))) = %+v, %v, want %+v\n%s", data, back, err, p, out)
		}
		opts, err := SpecOpts(p, sandbox.Session{}, 1000, 1000)
		if err != nil {
			t.Fatalf("SpecOpts(Parse(%q), no session) error = %v", data, err)
		}
		spec := emptySpec()
		for _, o := range opts {
			if err := o(spec); err != nil {
				t.Fatalf("SpecOpts(Parse(%q)) option error = %v", data, err)
			}
		}
	})
}
