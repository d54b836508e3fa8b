package session

import (
	"bytes"
	"reflect"
	"testing"
)

// FuzzParse checks that Parse never panics and that every header it
// accepts is valid, re-marshals, and parses back to the same header with
// the same bytes. Seeds live in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"type":"session","version":0,"id":"s","createdAt":5}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		h, err := Parse(line)
		if err != nil {
			return
		}
		if err := h.Validate(); err != nil {
			t.Fatalf("Parse(%q) accepted an invalid header: %v", line, err)
		}
		out, err := h.MarshalJSON()
		if err != nil {
			t.Fatalf("MarshalJSON(%+v) = %v", h, err)
		}
		back, err := Parse(out)
		if err != nil || !reflect.DeepEqual(back, h) {
			t.Fatalf("Parse(%s) = %+v, %v, want %+v", out, back, err, h)
		}
		again, err := back.MarshalJSON()
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("MarshalJSON(%+v) = %s, %v, want %s", back, again, err, out)
		}
	})
}
