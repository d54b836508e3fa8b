package jsonl

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
)

// FuzzScan checks that scanning never panics, that an accepted log has
// contiguous seqs from 0, and that writing the accepted events back (one
// per line, or packed) scans to the same events. Seeds live in
// testdata/fuzz/FuzzScan.
func FuzzScan(f *testing.F) {
	f.Add([]byte(testHeader + "\n" + ev("0") + "\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, events, err := scanAll(data)
		if err != nil {
			return
		}
		for i, e := range events {
			if e.Seq != int64(i) {
				t.Fatalf("accepted log has event %d with seq %d", i, e.Seq)
			}
			if !json.Valid(e.Data) || e.SurfaceOp != nil && !json.Valid(e.SurfaceOp) {
				t.Fatalf("accepted event %d has invalid JSON: data %q surfaceOp %q", i, e.Data, e.SurfaceOp)
			}
		}
		owned := make([]persistence.Event, 0, len(events))
		for _, e := range events {
			o, err := ownEvent(e)
			if err != nil {
				t.Fatalf("accepted event %+v cannot be appended: %v", e, err)
			}
			owned = append(owned, o)
		}
		line, err := h.MarshalJSON()
		if err != nil {
			t.Fatalf("accepted header %+v does not marshal: %v", h, err)
		}
		for _, packed := range []bool{false, true} {
			out := appendBatch(append(line, '\n'), owned, packed)
			h2, again, err := scanAll(out)
			if err != nil {
				t.Fatalf("rewritten log (packed %v) does not scan: %v\n%s", packed, err, out)
			}
			if !sameHeader(h2, h) {
				t.Fatalf("rewritten header %+v, want %+v", h2, h)
			}
			sameEvents(t, again, owned)
		}
	})
}

// FuzzEncodeSegment checks that EncodeSegment output uses only safe
// characters and "~", is never "." or "..", and decodes back; and that
// whatever DecodeSegment accepts encodes back to itself. Seeds live in
// testdata/fuzz/FuzzEncodeSegment.
func FuzzEncodeSegment(f *testing.F) {
	f.Add("session-1")
	f.Fuzz(func(t *testing.T, s string) {
		enc, err := EncodeSegment(s)
		if wantErr := s == "" || !utf8.ValidString(s); wantErr != (err != nil) {
			t.Fatalf("EncodeSegment(%q) = %q, %v; want error %v", s, enc, err, wantErr)
		}
		if err == nil {
			for i := 0; i < len(enc); i++ {
				if c := enc[i]; c != '~' && !isSafeUnit(rune(c)) {
					t.Fatalf("EncodeSegment(%q) = %q has unsafe byte %q", s, enc, c)
				}
			}
			if enc == "." || enc == ".." || enc == "" {
				t.Fatalf("EncodeSegment(%q) = %q", s, enc)
			}
			if n := segmentLen(s); n != len(enc) {
				t.Fatalf("segmentLen(%q) = %d, want %d", s, n, len(enc))
			}
			back, err := DecodeSegment(enc)
			if err != nil || back != s {
				t.Fatalf("DecodeSegment(%q) = %q, %v, want %q", enc, back, err, s)
			}
		}
		if dec, err := DecodeSegment(s); err == nil {
			enc, err := EncodeSegment(dec)
			if err != nil || enc != s {
				t.Fatalf("EncodeSegment(DecodeSegment(%q) = %q) = %q, %v, want %q", s, dec, enc, err, s)
			}
		}
	})
}
