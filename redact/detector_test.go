package redact

import (
	"bytes"
	"strings"
	"testing"
)

// prefixDetector finds every word that starts with its prefix.
type prefixDetector string

func (d prefixDetector) Find(text []byte) []Finding {
	var out []Finding
	for _, w := range strings.Fields(string(text)) {
		if strings.HasPrefix(w, string(d)) {
			out = append(out, Finding{Rule: "prefix-" + string(d), Secret: w})
		}
	}
	return out
}

// TestOptionsDetector: each Set uses the Detector it was made with and
// no other, so that Sets of one process may differ (there is no
// detector of the package); without one, a Writer passes bytes on
// without waiting for a newline.
func TestOptionsDetector(t *testing.T) {
	text := "a tok_0123456789 b key_0123456789\n"
	for _, tc := range []struct {
		d    Detector
		want string
	}{
		{prefixDetector("tok_"), "a [REDACTED:prefix-tok_] b key_0123456789\n"},
		{prefixDetector("key_"), "a tok_0123456789 b [REDACTED:prefix-key_]\n"},
		{nil, text},
	} {
		s := New(nil, Options{Detector: tc.d})
		if got := s.String(text); got != tc.want {
			t.Errorf("detector %v: String = %q, want %q", tc.d, got, tc.want)
		}
		var out bytes.Buffer
		w := s.Writer(&out)
		if _, err := w.Write([]byte("no newline yet")); err != nil {
			t.Fatal(err)
		}
		if held := out.Len() == 0; held != (tc.d != nil) {
			t.Errorf("detector %v: a Writer held a line back: %v, want %v", tc.d, held, tc.d != nil)
		}
	}
}
