package redact

import (
	"bytes"
	"cmp"
	"slices"
)

// MaxLine bounds how many bytes a Writer of a Set with a Detector holds
// back while it waits for a newline: a longer line is scanned in pieces
// of MaxLine bytes, and a secret across two pieces is not found.
const MaxLine = 4 << 10

// Detector finds secrets by their shape (tokens, keys) rather than by
// their value. Implementations live outside this package (redact/detect);
// the command builds one and passes it down to where Sets are made
// (Options.Detector), so that this package and its importers do not link
// a detector's dependencies.
type Detector interface {
	// Find returns the secrets in text, which holds whole lines. It must
	// be safe for concurrent use.
	Find(text []byte) []Finding
}

// Finding is one secret a Detector found.
type Finding struct {
	// Rule names what found it; it appears in "[REDACTED:Rule]".
	Rule string
	// Secret is the text to replace.
	Secret string
}

// detected returns p with what the Detector finds replaced; p itself
// when there is no Detector or it finds nothing.
func (s *Set) detected(p []byte) []byte {
	if s.detect == nil || len(p) == 0 {
		return p
	}
	found := s.detect.Find(p)
	if len(found) == 0 {
		return p
	}
	// Longest first, so that a secret inside another is not replaced
	// first and leaves the rest of the longer one.
	slices.SortFunc(found, func(a, b Finding) int { return cmp.Compare(len(b.Secret), len(a.Secret)) })
	for _, f := range found {
		if len(f.Secret) >= MinLen {
			p = bytes.ReplaceAll(p, []byte(f.Secret), []byte(Marker(f.Rule)))
		}
	}
	return p
}

// lines passes decided bytes b on: directly without a Detector, else
// through it up to the last newline (or in MaxLine pieces), holding the
// rest; final passes everything. It reports n written.
func (w *Writer) lines(b []byte, n int, final bool) (int, error) {
	if w.s.detect == nil {
		return w.pass(b, n)
	}
	w.line = append(w.line, b...)
	cut := len(w.line)
	if !final {
		cut = bytes.LastIndexByte(w.line, '\n') + 1
		if len(w.line)-cut >= MaxLine {
			cut = len(w.line)
		}
	}
	if cut == 0 {
		return n, nil
	}
	out := w.s.detected(w.line[:cut])
	if _, err := w.pass(out, 0); err != nil {
		return 0, err
	}
	w.line = append(w.line[:0], w.line[cut:]...)
	return n, nil
}
