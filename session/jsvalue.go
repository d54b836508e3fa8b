package session

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// JSValue returns the JSON text raw as dsh writes it after a
// JSON.parse / JSON.stringify round trip: what a transcript holds for an
// event's data and what a hook payload carries for a value the harness
// holds parsed (Claude Code's tool_input):
//
//   - whitespace is dropped;
//   - numbers are doubles written as JavaScript writes them (1.0 → 1,
//     1e21 → 1e+21, 0.0000001 → 1e-7, -0 → 0), and a number too large
//     for a double is null;
//   - strings are written as JSON.stringify writes them (escapes spelled
//     \n, \u001f …; U+2028, U+2029 and non-ASCII raw; a lone surrogate
//     escape such as \ud800 kept as an escape);
//   - object keys are in JavaScript's property order: keys that are array
//     indexes ("0" … "4294967294", no leading zeros) first, ascending,
//     then the others in the order they first appear; a repeated key
//     keeps its first place and its last value.
//
// raw must be valid JSON in UTF-8; anything else is an error.
func JSValue(raw []byte) ([]byte, error) {
	if !json.Valid(raw) {
		return nil, errors.New("not valid JSON")
	}
	if !utf8.Valid(raw) {
		return nil, errors.New("not valid UTF-8")
	}
	p := jsParser{b: raw}
	out, err := p.value(make([]byte, 0, len(raw)))
	if err != nil {
		return nil, err
	}
	return out, nil
}

// jsParser re-encodes one JSON text that json.Valid accepted.
type jsParser struct {
	b []byte
	i int
}

func (p *jsParser) space() {
	for p.i < len(p.b) && (p.b[p.i] == ' ' || p.b[p.i] == '\t' || p.b[p.i] == '\n' || p.b[p.i] == '\r') {
		p.i++
	}
}

// value appends the re-encoded value at p.i to dst.
func (p *jsParser) value(dst []byte) ([]byte, error) {
	p.space()
	if p.i >= len(p.b) {
		return nil, errors.New("unexpected end of JSON")
	}
	switch c := p.b[p.i]; {
	case c == '{':
		return p.object(dst)
	case c == '[':
		return p.array(dst)
	case c == '"':
		return p.str(dst), nil
	case c == 't':
		p.i += 4
		return append(dst, "true"...), nil
	case c == 'f':
		p.i += 5
		return append(dst, "false"...), nil
	case c == 'n':
		p.i += 4
		return append(dst, "null"...), nil
	default:
		return p.number(dst), nil
	}
}

// array re-encodes an array into dst.
func (p *jsParser) array(dst []byte) ([]byte, error) {
	p.i++ // '['
	dst = append(dst, '[')
	p.space()
	if p.b[p.i] == ']' {
		p.i++
		return append(dst, ']'), nil
	}
	for first := true; ; first = false {
		if !first {
			dst = append(dst, ',')
		}
		var err error
		if dst, err = p.value(dst); err != nil {
			return nil, err
		}
		p.space()
		if p.b[p.i] == ']' {
			p.i++
			return append(dst, ']'), nil
		}
		p.i++ // ','
	}
}

// number re-encodes a number as JavaScript writes it into dst.
func (p *jsParser) number(dst []byte) []byte {
	start := p.i
	plain := true // an integer of at most 15 digits, not -0: JavaScript writes it as it is
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c >= '0' && c <= '9' || c == '-' {
			p.i++
			continue
		}
		if c == '+' || c == '.' || c == 'e' || c == 'E' {
			plain = false
			p.i++
			continue
		}
		break
	}
	tok := p.b[start:p.i]
	if plain && len(tok) <= 15 && !(len(tok) == 2 && tok[0] == '-' && tok[1] == '0') {
		return append(dst, tok...)
	}
	f, _ := strconv.ParseFloat(string(tok), 64) // overflow gives ±Inf, written as null
	return appendJSNumber(dst, f)
}

// jsMember locates one member of an object being re-encoded in the
// output: its key (the canonical string, quotes included) from keyStart
// to keyEnd, then ':' and its value up to valEnd.
type jsMember struct {
	keyStart, keyEnd, valEnd int
}

// object re-encodes an object into dst. Members are written as they come;
// only an object with a repeated key or an array-index key is then
// rewritten in JavaScript's order.
func (p *jsParser) object(dst []byte) ([]byte, error) {
	p.i++ // '{'
	start := len(dst)
	dst = append(dst, '{')
	p.space()
	if p.b[p.i] == '}' {
		p.i++
		return append(dst, '}'), nil
	}
	var (
		stack   [8]jsMember // most objects are small: no allocation
		members = stack[:0]
		reorder bool
	)
	for {
		if len(members) > 0 {
			dst = append(dst, ',')
		}
		p.space()
		m := jsMember{keyStart: len(dst)}
		dst = p.str(dst)
		m.keyEnd = len(dst)
		p.space()
		p.i++ // ':'
		dst = append(dst, ':')
		var err error
		if dst, err = p.value(dst); err != nil {
			return nil, err
		}
		m.valEnd = len(dst)
		key := dst[m.keyStart:m.keyEnd]
		if _, ok := arrayIndex(key); ok {
			reorder = true
		}
		for _, o := range members {
			if !reorder && bytes.Equal(dst[o.keyStart:o.keyEnd], key) {
				reorder = true
			}
		}
		members = append(members, m)
		p.space()
		if p.b[p.i] == '}' {
			p.i++
			break
		}
		p.i++ // ','
	}
	if !reorder {
		return append(dst, '}'), nil
	}
	return reorderMembers(dst, start, members), nil
}

// reorderMembers rewrites the object that starts at dst[start], whose
// members are members, in JavaScript's order: a repeated key keeps its
// first place and its last value; array-index keys first, ascending; the
// rest keep their order. The canonical encoding of a key is injective, so
// equal keys are equal bytes.
func reorderMembers(dst []byte, start int, members []jsMember) []byte {
	body := slices.Clone(dst[start:])
	var order []jsMember // spans into body, the last value of each key
	for _, m := range members {
		m.keyStart, m.keyEnd, m.valEnd = m.keyStart-start, m.keyEnd-start, m.valEnd-start
		replaced := false
		for k, o := range order {
			if bytes.Equal(body[o.keyStart:o.keyEnd], body[m.keyStart:m.keyEnd]) {
				order[k] = m
				replaced = true
				break
			}
		}
		if !replaced {
			order = append(order, m)
		}
	}
	slices.SortStableFunc(order, func(a, b jsMember) int {
		ai, aok := arrayIndex(body[a.keyStart:a.keyEnd])
		bi, bok := arrayIndex(body[b.keyStart:b.keyEnd])
		switch {
		case aok && bok:
			return cmp.Compare(ai, bi)
		case aok:
			return -1
		case bok:
			return 1
		}
		return 0
	})
	dst = append(dst[:start], '{')
	for i, m := range order {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, body[m.keyStart:m.valEnd]...)
	}
	return append(dst, '}')
}

// arrayIndex reports whether key, a canonical JSON string with its
// quotes, is a canonical array index of JavaScript (0 … 2^32-2 without
// leading zeros).
func arrayIndex(key []byte) (uint64, bool) {
	key = key[1 : len(key)-1]
	if len(key) == 0 || len(key) > 10 || len(key) > 1 && key[0] == '0' {
		return 0, false
	}
	var n uint64
	for _, c := range key {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	return n, n < 1<<32-1
}

// str appends the string token at p.i as JSON.stringify writes the string
// JSON.parse reads from it. A token without escapes is already in that
// form (json.Valid refused raw control characters, and the input is
// UTF-8); one with escapes is decoded into UTF-16 code units, as
// JSON.parse does (a lone surrogate escape stays a lone unit), and written
// again.
func (p *jsParser) str(dst []byte) []byte {
	end := p.i + 1
	for p.b[end] != '"' {
		if p.b[end] == '\\' {
			return appendUnits(dst, p.units())
		}
		end++
	}
	dst = append(dst, p.b[p.i:end+1]...)
	p.i = end + 1
	return dst
}

// units decodes the string token at p.i into UTF-16 code units.
func (p *jsParser) units() []uint16 {
	p.i++ // '"'
	var units []uint16
	for {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return units
		case c == '\\':
			e := p.b[p.i+1]
			p.i += 2
			switch e {
			case 'b':
				units = append(units, '\b')
			case 'f':
				units = append(units, '\f')
			case 'n':
				units = append(units, '\n')
			case 'r':
				units = append(units, '\r')
			case 't':
				units = append(units, '\t')
			case 'u':
				v, _ := strconv.ParseUint(string(p.b[p.i:p.i+4]), 16, 16) // json.Valid checked the four hex digits
				units = append(units, uint16(v))
				p.i += 4
			default: // '"', '\\', '/'
				units = append(units, uint16(e))
			}
		case c < utf8.RuneSelf:
			units = append(units, uint16(c))
			p.i++
		default:
			r, size := utf8.DecodeRune(p.b[p.i:])
			p.i += size
			if r >= 0x10000 {
				hi, lo := utf16.EncodeRune(r)
				units = append(units, uint16(hi), uint16(lo))
			} else {
				units = append(units, uint16(r))
			}
		}
	}
}

// appendUnits writes a UTF-16 string as JSON.stringify does.
func appendUnits(dst []byte, units []uint16) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(units); i++ {
		u := rune(units[i])
		switch {
		case utf16.IsSurrogate(u):
			if u < 0xDC00 && i+1 < len(units) && units[i+1] >= 0xDC00 && units[i+1] < 0xE000 {
				dst = utf8.AppendRune(dst, utf16.DecodeRune(u, rune(units[i+1])))
				i++
				continue
			}
			dst = append(dst, '\\', 'u', lowerHex[u>>12], lowerHex[u>>8&0xF], lowerHex[u>>4&0xF], lowerHex[u&0xF])
		case u < 0x80:
			dst = appendASCII(dst, byte(u))
		default:
			dst = utf8.AppendRune(dst, u)
		}
	}
	return append(dst, '"')
}

// appendJSNumber writes f as JavaScript's JSON.stringify writes a number:
// Number::toString for finite values, null for NaN and ±Inf.
func appendJSNumber(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return append(dst, "null"...)
	}
	if f == 0 {
		return append(dst, '0')
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// Shortest round-trip digits d1.d2…dk and exponent, value = 0.d × 10^n.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := bytes.Cut([]byte(e), []byte{'e'})
	digits := bytes.ReplaceAll(mant, []byte{'.'}, nil)
	x, _ := strconv.Atoi(string(exp))
	k, n := len(digits), x+1
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}
