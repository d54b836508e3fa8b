package session

import (
	"strconv"
	"unicode/utf8"
)

// AppendJSONString appends s as a JSON string the way JavaScript's
// JSON.stringify writes it, so that every byte dsh-sandbox writes in a dsh
// format (headers, transcripts, hook payloads) is the byte dsh writes:
// `"` and `\` are escaped, so are the control characters below U+0020
// (\b, \t, \n, \f and \r by name, the others as \u00xx with lowercase
// hex), and everything else is written raw: `<`, `>`, `&`, U+007F and
// U+2028/U+2029 included (encoding/json escapes the last two).
//
// A JavaScript string is UTF-16 and always well formed here, so a byte of
// s that is not UTF-8 is written as U+FFFD, the character a UTF-8 decoder
// reading those bytes would have produced.
func AppendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			dst = appendASCII(dst, c)
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, "\uFFFD"...)
			i++
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

const lowerHex = "0123456789abcdef"

// appendASCII appends the ASCII character c as it appears inside a
// string JSON.stringify writes.
func appendASCII(dst []byte, c byte) []byte {
	switch c {
	case '"', '\\':
		return append(dst, '\\', c)
	case '\b':
		return append(dst, '\\', 'b')
	case '\t':
		return append(dst, '\\', 't')
	case '\n':
		return append(dst, '\\', 'n')
	case '\f':
		return append(dst, '\\', 'f')
	case '\r':
		return append(dst, '\\', 'r')
	}
	if c < 0x20 {
		return append(dst, '\\', 'u', '0', '0', lowerHex[c>>4], lowerHex[c&0xF])
	}
	return append(dst, c)
}

// jsNumber reports the value of a JSON number token as JavaScript's
// JSON.parse reads it: the nearest double (Go's ParseFloat rounds the same
// way), ±Inf when it overflows.
func jsNumber(tok string) float64 {
	f, _ := strconv.ParseFloat(tok, 64) // a JSON number always parses; overflow gives ±Inf
	return f
}
