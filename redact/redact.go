// Package redact replaces known secret values by "[REDACTED:NAME]" in
// text and in byte streams (issue 15): the output a call captures, its
// spill files, job output, audit records and hook payloads. A Set is
// compiled once from name → value pairs; its Writer redacts a stream
// written in pieces of any size, so a secret split across two or more
// writes is still replaced, and no byte of a possible secret leaves the
// Writer before it is known whether the secret is there.
//
// Values shorter than MinLen bytes are not redacted: replacing "true" or
// "1234" everywhere would destroy the output and tell the reader the
// value anyway. Set.Skipped names them.
//
// It imports only the standard library, so that every layer may use it;
// sandbox, api, hooks and cmd/dsh-sandbox do.
package redact

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"io"
	"slices"
	"strings"
)

// MinLen is the shortest value a Set redacts, in bytes: shorter values
// under secret-looking names are mostly flags and numbers ("true",
// "false", "1234"), and hiding them everywhere would garble the output.
const MinLen = 6

// Secret is one value to redact and the name that replaces it.
type Secret struct {
	// Name appears in the marker "[REDACTED:Name]"; bytes outside
	// [A-Za-z0-9_.-] are shown as "_", so the marker is safe in JSON,
	// shell and Markdown. An empty name is shown as "SECRET".
	Name string
	// Value is the secret itself; values shorter than MinLen are skipped.
	Value string
}

// Options configure New. The zero value redacts the values as given.
type Options struct {
	// Base64 also redacts the base64 forms of every value (standard and
	// URL alphabets, padded or not, at each of the three alignments a
	// value can have inside a longer base64 text), under the value's
	// name.
	Base64 bool
	// Detector, when set, also replaces what it finds, by
	// "[REDACTED:<rule>]"; a Writer then holds its output back until a
	// newline or MaxLine bytes. Nil finds nothing by its shape.
	Detector Detector
}

// Set is a compiled list of secrets. The nil *Set redacts nothing. A Set
// is immutable and safe for concurrent use; its Writers are not.
type Set struct {
	pats    []pattern // longest first
	byFirst [256][]int32
	first   [256]bool
	pairs   [1 << 13]byte // bit set of the patterns' first two bytes
	maxLen  int
	skipped []string
	detect  Detector // Options.Detector
}

type pattern struct {
	value  []byte
	marker []byte
}

// New compiles secrets: each value as it is and as it appears inside a
// JSON string (escaped quotes, backslashes, control characters, <, >
// and &), plus the base64 forms when o.Base64 is set. A value given
// under several names is redacted under the first name in name order; values shorter than MinLen are
// left out and listed by Skipped. New does not keep secrets.
func New(secrets []Secret, o Options) *Set {
	sorted := slices.Clone(secrets)
	slices.SortStableFunc(sorted, func(a, b Secret) int { return strings.Compare(a.Name, b.Name) })
	s := &Set{detect: o.Detector}
	seen := map[string]bool{}
	add := func(v, marker string) {
		if len(v) < MinLen || seen[v] {
			return
		}
		seen[v] = true
		s.pats = append(s.pats, pattern{value: []byte(v), marker: []byte(marker)})
	}
	for _, sec := range sorted {
		if len(sec.Value) < MinLen {
			if sec.Value != "" {
				s.skipped = append(s.skipped, sec.Name)
			}
			continue
		}
		marker := Marker(sec.Name)
		add(sec.Value, marker)
		for _, f := range jsonForms(sec.Value) {
			add(f, marker)
		}
		if o.Base64 {
			for _, f := range base64Forms(sec.Value) {
				add(f, marker)
			}
		}
	}
	slices.SortFunc(s.pats, func(a, b pattern) int {
		return cmp.Or(cmp.Compare(len(b.value), len(a.value)), bytes.Compare(a.value, b.value))
	})
	for i, p := range s.pats {
		c := p.value[0]
		s.byFirst[c] = append(s.byFirst[c], int32(i))
		s.first[c] = true
		pair := uint16(c)<<8 | uint16(p.value[1])
		s.pairs[pair>>3] |= 1 << (pair & 7)
		s.maxLen = max(s.maxLen, len(p.value))
	}
	s.skipped = slices.Compact(s.skipped)
	return s
}

// Marker returns the text that replaces a secret named name.
func Marker(name string) string {
	if name == "" {
		name = "SECRET"
	}
	b := []byte(name)
	for i, c := range b {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			b[i] = '_'
		}
	}
	return "[REDACTED:" + string(b) + "]"
}

// jsonForms returns v as it appears inside a JSON string (hook payloads,
// JSON output), with and without the escaping of <, > and & that
// encoding/json does by default; for most values both equal v.
func jsonForms(v string) []string {
	var forms []string
	for _, html := range []bool{true, false} {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(html)
		if enc.Encode(v) == nil {
			forms = append(forms, strings.TrimSuffix(strings.TrimPrefix(strings.TrimSuffix(b.String(), "\n"), `"`), `"`))
		}
	}
	return forms
}

// base64Forms returns the parts of the base64 encodings of v that depend
// on v alone, whatever bytes surround it, for each alignment and both
// alphabets.
func base64Forms(v string) []string {
	var forms []string
	for off := range 3 {
		buf := make([]byte, off+len(v))
		copy(buf[off:], v)
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			e := enc.EncodeToString(buf)
			from := (8*off + 5) / 6      // first character without prefix bits
			to := 8 * (off + len(v)) / 6 // characters with all six bits from v
			if to-from >= MinLen {
				forms = append(forms, e[from:to])
			}
			if off == 0 {
				// The padded encoding of v alone, as base64(1) prints it.
				forms = append(forms, enc.WithPadding(base64.StdPadding).EncodeToString([]byte(v)))
			}
		}
	}
	return forms
}

// Len returns the number of rules s applies: the byte patterns it
// redacts (values and their encodings), plus one for a Detector. 0 (also
// for nil) means s changes nothing.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	if s.detect != nil {
		return len(s.pats) + 1
	}
	return len(s.pats)
}

// Skipped returns the names whose values were too short to redact, in
// name order. The caller must not modify it.
func (s *Set) Skipped() []string {
	if s == nil {
		return nil
	}
	return s.skipped
}

// String returns v with every secret replaced, longest match first,
// scanning from the left.
func (s *Set) String(v string) string {
	if s.Len() == 0 {
		return v
	}
	return string(s.Bytes([]byte(v)))
}

// Bytes is String for a byte slice; it returns p itself when nothing
// matched.
func (s *Set) Bytes(p []byte) []byte {
	if s.Len() == 0 {
		return p
	}
	if len(s.pats) > 0 && s.mayMatch(p) {
		p, _ = s.scan(nil, p, true)
	}
	return s.detected(p)
}

// mayMatch reports whether p holds a byte that begins a pattern.
func (s *Set) mayMatch(p []byte) bool {
	for _, c := range p {
		if s.first[c] {
			return true
		}
	}
	return false
}

// scan appends buf to out with every secret replaced. Unless final, it
// stops at the first position where a secret may begin but buf ends
// before it can be decided, and returns that position as held (the
// bytes from there on were not appended); otherwise held is len(buf).
// Such a position lies less than maxLen bytes before the end.
func (s *Set) scan(out, buf []byte, final bool) (_ []byte, held int) {
	lit := 0 // start of the bytes not yet appended
	for i := 0; i < len(buf); {
		i += s.skip(buf[i:])
		if i == len(buf) {
			break
		}
		k, wait := s.matchAt(buf[i:], final)
		if wait {
			return append(out, buf[lit:i]...), i
		}
		if k < 0 {
			i++
			continue
		}
		out = append(out, buf[lit:i]...)
		out = append(out, s.pats[k].marker...)
		i += len(s.pats[k].value)
		lit = i
	}
	return append(out, buf[lit:]...), len(buf)
}

// skip returns how many bytes at the start of b cannot begin a pattern:
// their first two bytes are no pattern's (a last byte is judged by its
// first byte alone).
func (s *Set) skip(b []byte) int {
	i := 0
	for ; i+1 < len(b); i++ {
		if pair := uint16(b[i])<<8 | uint16(b[i+1]); s.pairs[pair>>3]&(1<<(pair&7)) != 0 {
			return i
		}
	}
	if i < len(b) && !s.first[b[i]] {
		i++
	}
	return i
}

// matchAt returns the longest pattern b begins with, or -1. wait is true
// when b is a proper prefix of a pattern longer than any that matches:
// more bytes decide (never when final).
func (s *Set) matchAt(b []byte, final bool) (k int, wait bool) {
	for _, j := range s.byFirst[b[0]] {
		v := s.pats[j].value
		if len(b) >= len(v) {
			if bytes.Equal(b[:len(v)], v) {
				return int(j), false
			}
		} else if !final && bytes.Equal(b, v[:len(b)]) {
			return -1, true
		}
	}
	return -1, false
}

// Writer redacts a byte stream written in pieces and passes it to an
// underlying writer. It holds back fewer bytes than the longest secret
// (only while they may still begin one) until the following write or
// Close decides them. It is not safe for concurrent use.
type Writer struct {
	s     *Set
	w     io.Writer
	carry []byte
	buf   []byte
	out   []byte
	line  []byte // decided bytes the Detector has not seen yet
	err   error
}

// Writer returns a Writer that writes the redacted stream to w. With a
// nil or empty Set it passes every write through unchanged.
func (s *Set) Writer(w io.Writer) *Writer { return &Writer{s: s, w: w} }

// Write redacts p and writes what is decided to the underlying writer. It
// returns len(p) unless the underlying writer failed; after a failure
// every call returns that error.
func (w *Writer) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	if w.s.Len() == 0 {
		return w.pass(p, len(p))
	}
	if len(w.s.pats) == 0 {
		return w.lines(p, len(p), false)
	}
	in := p
	if len(w.carry) > 0 {
		w.buf = append(append(w.buf[:0], w.carry...), p...)
		in = w.buf
	}
	var held int
	w.out, held = w.s.scan(w.out[:0], in, false)
	w.carry = append(w.carry[:0], in[held:]...)
	return w.lines(w.out, len(p), false)
}

// Close writes the bytes still held back (redacted as a stream's end).
// It does not close the underlying writer. Close may be called more than
// once; later writes start a new stream.
func (w *Writer) Close() error {
	if w.err != nil {
		return w.err
	}
	var end []byte
	if len(w.carry) > 0 {
		w.out, _ = w.s.scan(w.out[:0], w.carry, true)
		w.carry = w.carry[:0]
		end = w.out
	}
	_, err := w.lines(end, 0, true)
	return err
}

// pass writes b to the underlying writer and reports n written.
func (w *Writer) pass(b []byte, n int) (int, error) {
	if len(b) == 0 {
		return n, nil
	}
	m, err := w.w.Write(b)
	if err == nil && m < len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		w.err = err
		return 0, err
	}
	return n, nil
}
