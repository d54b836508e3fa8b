package jsonl

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// Compression selects how a transcript file is encoded on disk. The zero
// value "" means CompressionNone.
type Compression string

const (
	// CompressionNone writes plain newline-delimited UTF-8 JSON
	// (session.jsonl).
	CompressionNone Compression = "none"
	// CompressionZstd writes a sequence of independent checksummed
	// Zstandard frames (session.jsonl.zstd): the first holds exactly the
	// header line, each later one a durable append batch.
	CompressionZstd Compression = "zstd"
)

// ParseCompression parses a configured compression name ("none" or
// "zstd"); any other value is an error naming it.
func ParseCompression(s string) (Compression, error) {
	switch Compression(s) {
	case CompressionNone, CompressionZstd:
		return Compression(s), nil
	}
	return "", fmt.Errorf("jsonl: compression %q: must be %q or %q", s, CompressionNone, CompressionZstd)
}

// fileName returns the transcript file name for c; every value other than
// CompressionZstd names the plain file.
func (c Compression) fileName() string {
	if c == CompressionZstd {
		return zstdFileName
	}
	return plainFileName
}

const (
	plainFileName = "session.jsonl"
	zstdFileName  = "session.jsonl.zstd"
	// noCwdDir is the project directory of sessions without a cwd.
	noCwdDir = "_no-cwd"
	// maxSlug is how many characters of a project slug are kept.
	maxSlug = 251
	// escapeLen is the length of one escaped UTF-16 unit, "~XXXX".
	escapeLen = 5
)

const upperHex = "0123456789ABCDEF"

// safeByte marks the ASCII bytes that stay literal in a path segment.
var safeByte = func() (t [256]bool) {
	for c := range t {
		t[c] = 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	return t
}()

// isSafeUnit reports whether a UTF-16 code unit stays literal in a path
// segment: [A-Za-z0-9._-].
func isSafeUnit(u rune) bool {
	return u < 0x80 && safeByte[u]
}

// safeRun returns the length of the run of safe bytes at the start of s.
func safeRun(s string) int {
	i := 0
	for i < len(s) && safeByte[s[i]] {
		i++
	}
	return i
}

func writeEscape(b *strings.Builder, u rune) {
	b.WriteByte('~')
	b.WriteByte(upperHex[u>>12&0xF])
	b.WriteByte(upperHex[u>>8&0xF])
	b.WriteByte(upperHex[u>>4&0xF])
	b.WriteByte(upperHex[u&0xF])
}

// EncodeSegment encodes s as one safe path segment, injectively, the way
// dsh does: over UTF-16 code units, [A-Za-z0-9._-] stay and every other
// unit (including "~") becomes "~" plus four uppercase hex digits. A
// segment that is exactly "." or ".." is escaped whole ("~002E",
// "~002E~002E") so it never names the current or parent directory.
//
// The empty string is an error, and so is invalid UTF-8: a Go string that
// is not UTF-8 has no UTF-16 form, and mapping it to U+FFFD would break
// injectivity.
func EncodeSegment(s string) (string, error) {
	if err := checkSegment(s); err != nil {
		return "", err
	}
	var b strings.Builder
	b.Grow(segmentLen(s))
	writeSegment(&b, s)
	return b.String(), nil
}

func checkSegment(s string) error {
	if s == "" {
		return errors.New("jsonl: cannot encode an empty path segment")
	}
	if !utf8.ValidString(s) {
		return fmt.Errorf("jsonl: path segment %q is not valid UTF-8", s)
	}
	return nil
}

// segmentLen is the encoded length of a valid, non-empty s.
func segmentLen(s string) int {
	switch s {
	case ".":
		return escapeLen
	case "..":
		return 2 * escapeLen
	}
	n := 0
	for _, r := range s {
		switch {
		case isSafeUnit(r):
			n++
		case r >= 0x10000:
			n += 2 * escapeLen
		default:
			n += escapeLen
		}
	}
	return n
}

// writeSegment writes the encoding of a valid, non-empty s.
func writeSegment(b *strings.Builder, s string) {
	switch s {
	case ".":
		writeEscape(b, '.')
		return
	case "..":
		writeEscape(b, '.')
		writeEscape(b, '.')
		return
	}
	for i := 0; i < len(s); {
		n := safeRun(s[i:])
		b.WriteString(s[i : i+n])
		i += n
		if i == len(s) {
			break
		}
		if c := s[i]; c < utf8.RuneSelf {
			writeEscape(b, rune(c))
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		if r >= 0x10000 {
			hi, lo := utf16.EncodeRune(r)
			writeEscape(b, hi)
			writeEscape(b, lo)
		} else {
			writeEscape(b, r)
		}
	}
}

// DecodeSegment inverts EncodeSegment. It accepts only what EncodeSegment
// produces, so DecodeSegment(s) succeeds exactly when
// EncodeSegment(result) == s: it refuses empty input, characters outside
// [A-Za-z0-9._~-], lowercase or short escapes, escapes of units that stay
// literal (except the whole-segment "." and ".." forms), a literal "." or
// "..", and unpaired surrogates.
func DecodeSegment(s string) (string, error) {
	switch s {
	case "":
		return "", errors.New("jsonl: cannot decode an empty path segment")
	case "~002E":
		return ".", nil
	case "~002E~002E":
		return "..", nil
	case ".", "..":
		return "", fmt.Errorf("jsonl: path segment %q is not an encoded segment", s)
	}
	var b strings.Builder
	b.Grow(len(s))
	var high rune = -1 // pending high surrogate
	for i := 0; i < len(s); {
		c := s[i]
		if c != '~' {
			if high >= 0 {
				return "", fmt.Errorf("jsonl: path segment %q: unpaired surrogate at offset %d", s, i-escapeLen)
			}
			if c >= utf8.RuneSelf || !isSafeUnit(rune(c)) {
				return "", fmt.Errorf("jsonl: path segment %q: character %q at offset %d must be escaped", s, c, i)
			}
			b.WriteByte(c)
			i++
			continue
		}
		u, ok := parseEscape(s, i)
		if !ok {
			return "", fmt.Errorf("jsonl: path segment %q: malformed escape at offset %d (want ~ and 4 uppercase hex digits)", s, i)
		}
		switch {
		case high >= 0:
			if !utf16.IsSurrogate(u) || u < 0xDC00 {
				return "", fmt.Errorf("jsonl: path segment %q: unpaired surrogate at offset %d", s, i-escapeLen)
			}
			b.WriteRune(utf16.DecodeRune(high, u))
			high = -1
		case isSafeUnit(u):
			return "", fmt.Errorf("jsonl: path segment %q: escape at offset %d encodes %q, which stays literal", s, i, u)
		case 0xD800 <= u && u < 0xDC00:
			high = u
		case 0xDC00 <= u && u < 0xE000:
			return "", fmt.Errorf("jsonl: path segment %q: unpaired surrogate at offset %d", s, i)
		default:
			b.WriteRune(u)
		}
		i += escapeLen
	}
	if high >= 0 {
		return "", fmt.Errorf("jsonl: path segment %q: unpaired surrogate at its end", s)
	}
	return b.String(), nil
}

// parseEscape reads "~XXXX" (uppercase hex) at s[i:].
func parseEscape(s string, i int) (rune, bool) {
	if i+escapeLen > len(s) {
		return 0, false
	}
	var u rune
	for _, c := range []byte(s[i+1 : i+escapeLen]) {
		switch {
		case '0' <= c && c <= '9':
			u = u<<4 | rune(c-'0')
		case 'A' <= c && c <= 'F':
			u = u<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return u, true
}

// ProjectKey returns the project directory name of a session cwd, the way
// dsh builds it: per UTF-16 unit, a run of "/", "\" or ":" becomes one
// "-", safe units stay and others are escaped as in EncodeSegment; leading
// "-" are stripped, an empty slug becomes "root", the first 251 characters
// are kept and the slug is wrapped as "--<slug>--". The mapping is lossy by
// design (distinct paths may share a project directory; session ids keep
// sessions apart). Bytes of cwd that are not UTF-8 are escaped as U+FFFD.
func ProjectKey(cwd string) string {
	var b strings.Builder
	b.Grow(maxSlug + 4)
	writeProjectKey(&b, cwd)
	return b.String()
}

// slugWriter writes a project slug, dropping leading "-" and stopping at
// maxSlug characters.
type slugWriter struct {
	b *strings.Builder
	n int
}

func (w *slugWriter) byte(c byte) {
	if w.n == maxSlug || w.n == 0 && c == '-' {
		return
	}
	w.b.WriteByte(c)
	w.n++
}

func (w *slugWriter) str(s string) {
	if w.n == 0 {
		s = strings.TrimLeft(s, "-")
	}
	s = s[:min(len(s), maxSlug-w.n)]
	w.b.WriteString(s)
	w.n += len(s)
}

func (w *slugWriter) escape(u rune) {
	w.byte('~')
	w.byte(upperHex[u>>12&0xF])
	w.byte(upperHex[u>>8&0xF])
	w.byte(upperHex[u>>4&0xF])
	w.byte(upperHex[u&0xF])
}

func writeProjectKey(b *strings.Builder, cwd string) {
	b.WriteString("--")
	w := slugWriter{b: b}
	sep := false
	for i := 0; i < len(cwd) && w.n < maxSlug; {
		c := cwd[i]
		if c == '/' || c == '\\' || c == ':' {
			if !sep {
				w.byte('-')
			}
			sep = true
			i++
			continue
		}
		sep = false
		if n := safeRun(cwd[i:]); n > 0 {
			w.str(cwd[i : i+n])
			i += n
			continue
		}
		if c < utf8.RuneSelf {
			w.escape(rune(c))
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(cwd[i:])
		i += size
		if r >= 0x10000 {
			hi, lo := utf16.EncodeRune(r)
			w.escape(hi)
			w.escape(lo)
		} else {
			w.escape(r) // includes utf8.RuneError for invalid bytes
		}
	}
	if w.n == 0 {
		b.WriteString("root")
	}
	b.WriteString("--")
}

// Path returns the transcript file of h under root:
// <root>/<ProjectKey(h.Cwd) or "_no-cwd">/<EncodeSegment(h.ID)>/session.jsonl,
// or session.jsonl.zstd when c is CompressionZstd. It performs no I/O and
// allocates only the result. It returns "" when h.ID cannot be encoded
// (empty or not UTF-8).
func Path(root string, h session.Header, c Compression) string {
	return cleanPath(filepath.Clean(root), h, c)
}

// cleanPath is Path for a root that is already clean.
func cleanPath(root string, h session.Header, c Compression) string {
	if checkSegment(h.ID) != nil {
		return ""
	}
	name := c.fileName()
	// A project key has at most min(maxSlug, escapeLen per byte of cwd)+4
	// bytes; _no-cwd fits in that too.
	n := len(root) + 1 + min(maxSlug, escapeLen*len(h.Cwd)+len(noCwdDir)) + 4 + 1 + segmentLen(h.ID) + 1 + len(name)
	var b strings.Builder
	b.Grow(n)
	b.WriteString(root)
	if !strings.HasSuffix(root, string(filepath.Separator)) {
		b.WriteByte(filepath.Separator)
	}
	if h.Cwd == "" {
		b.WriteString(noCwdDir)
	} else {
		writeProjectKey(&b, h.Cwd)
	}
	b.WriteByte(filepath.Separator)
	writeSegment(&b, h.ID)
	b.WriteByte(filepath.Separator)
	b.WriteString(name)
	return b.String()
}
