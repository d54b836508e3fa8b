package jsonl

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
)

// syntaxError marks a line that is not valid JSON (a torn-write candidate).
type syntaxError struct {
	line int
}

func (e *syntaxError) Error() string {
	return fmt.Sprintf("jsonl: line %d: not valid JSON", e.line)
}

// arenaChunk is the size of the blocks event data is carved from; values
// larger than a quarter of it get their own allocation.
const arenaChunk = 32 << 10

// maxInterned bounds the table of distinct event types a decoder shares.
const maxInterned = 256

// recordDecoder turns event lines and packed rows into events.
type recordDecoder struct {
	fn         func(persistence.Event) error
	headerOnly bool
	// stable says lines stay valid and unchanged after decoding, so event
	// data may share their memory instead of being copied.
	stable  bool
	line    int   // number of the line being decoded; the header is line 1
	next    int64 // seq the next event must carry
	arena   []byte
	types   map[string]string
	members [][]byte // scratch for packed rows
	gaps    []int64  // scratch for packed rows
	// lenient accepts a forward jump of seq and records it in seqGaps;
	// otherwise any seq other than next is an error.
	lenient bool
	seqGaps []persistence.SeqGap
}

// own returns b in a form the caller may keep: b itself when lines are
// stable, else a copy carved from the current arena block. Either way its
// capacity is limited, so appending to it never reaches a neighbour.
func (d *recordDecoder) own(b []byte) []byte {
	if d.stable {
		return b[:len(b):len(b)]
	}
	if len(b) > arenaChunk/4 {
		return bytes.Clone(b)
	}
	if cap(d.arena)-len(d.arena) < len(b) {
		d.arena = make([]byte, 0, arenaChunk)
	}
	start := len(d.arena)
	d.arena = append(d.arena, b...)
	return d.arena[start:len(d.arena):len(d.arena)]
}

// alloc returns an empty slice with capacity n that the caller may fill
// and keep, carved from the arena like own.
func (d *recordDecoder) alloc(n int) []byte {
	if n > arenaChunk/4 {
		return make([]byte, 0, n)
	}
	if cap(d.arena)-len(d.arena) < n {
		d.arena = make([]byte, 0, arenaChunk)
	}
	start := len(d.arena)
	d.arena = d.arena[:start+n]
	return d.arena[start : start : start+n]
}

// intern returns s as a string, sharing one copy per distinct event type.
func (d *recordDecoder) intern(s []byte) string {
	if t, ok := d.types[string(s)]; ok {
		return t
	}
	t := string(s)
	if d.types == nil {
		d.types = make(map[string]string)
	}
	if len(d.types) < maxInterned {
		d.types[t] = t
	}
	return t
}

func (d *recordDecoder) errorf(format string, args ...any) error {
	return fmt.Errorf("jsonl: line %d: "+format, append([]any{d.line}, args...)...)
}

// checkSeq accepts got when it continues the log, or when it jumps forward
// and the decoder is lenient (the jump is recorded); anything else wraps
// persistence.ErrSeqGap.
func (d *recordDecoder) checkSeq(got int64) error {
	if got == d.next {
		return nil
	}
	if d.lenient && got > d.next {
		d.seqGaps = append(d.seqGaps, persistence.SeqGap{Line: int64(d.line), Want: d.next, Got: got})
		d.next = got
		return nil
	}
	return fmt.Errorf("jsonl: line %d: seq %d, want %d: %w", d.line, got, d.next, persistence.ErrSeqGap)
}

// rawRecord holds the raw JSON tokens of the envelope keys of one line;
// nil means absent. Other keys are ignored.
type rawRecord struct {
	typ, seq, time, seq0, time0, data []byte
	ignorable, sourceEventSeqs        []byte
	surfaceOp                         []byte
}

// record decodes one line and passes its events to fn. validated says
// the line is already known to be valid JSON.
func (d *recordDecoder) record(line []byte, validated bool) error {
	if !validated && !json.Valid(line) {
		return &syntaxError{line: d.line}
	}
	var r rawRecord
	if !splitObject(line, &r) {
		return d.errorf("record is not a JSON object")
	}
	if r.typ == nil {
		return d.errorf("record has no type")
	}
	typ, ok := d.decodeString(r.typ)
	if !ok || typ == "" {
		return d.errorf("record type must be a non-empty string, got %.40s", r.typ)
	}
	switch typ {
	case tagSession:
		return d.errorf("unexpected second session header")
	case tagTextChunks:
		return d.packed(&r, typ, textDelta)
	case tagReasoningChunk:
		return d.packed(&r, typ, reasoningDelta)
	case tagToolCallChunks:
		return d.packed(&r, typ, toolCallDelta)
	}
	return d.event(&r, typ)
}

// event decodes an event line of type typ (not a packed row) and passes
// it to fn.
func (d *recordDecoder) event(r *rawRecord, typ string) error {
	switch {
	case r.seq == nil:
		return d.errorf("event %q has no seq", typ)
	case r.time == nil:
		return d.errorf("event %q has no time", typ)
	case r.data == nil:
		return d.errorf("event %q has no data", typ)
	}
	seq, ok := parseInt(r.seq)
	if !ok {
		return d.errorf("event %q: seq must be an integer, got %.40s", typ, r.seq)
	}
	tm, ok := parseInt(r.time)
	if !ok {
		return d.errorf("event %q: time must be an integer, got %.40s", typ, r.time)
	}
	if err := d.checkSeq(seq); err != nil {
		return err
	}
	e := persistence.Event{Type: typ, Seq: seq, Time: tm, Data: d.own(r.data)}
	if r.ignorable != nil {
		switch string(r.ignorable) {
		case "true":
			e.Ignorable = true
		case "false", "null":
		default:
			return d.errorf("event %q: ignorable must be a boolean, got %.40s", typ, r.ignorable)
		}
	}
	if r.sourceEventSeqs != nil {
		seqs, err := decodeSeqs(r.sourceEventSeqs)
		if err != nil {
			return d.errorf("event %q: sourceEventSeqs: %w", typ, err)
		}
		e.SourceEventSeqs = seqs
	}
	if r.surfaceOp != nil {
		e.SurfaceOp = d.own(r.surfaceOp)
	}
	d.next++
	return d.fn(e)
}

// decodeSeqs decodes a sourceEventSeqs value; empty and null give nil.
func decodeSeqs(tok []byte) ([]int64, error) {
	var seqs []int64
	if err := json.Unmarshal(tok, &seqs); err != nil {
		return nil, err
	}
	if len(seqs) == 0 {
		return nil, nil
	}
	return seqs, nil
}

// decodeString decodes a JSON string token, interning plain ASCII/UTF-8
// tokens without escapes.
func (d *recordDecoder) decodeString(tok []byte) (string, bool) {
	if !isStringToken(tok) {
		return "", false
	}
	inner := tok[1 : len(tok)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return d.intern(inner), true
	}
	var s string
	if json.Unmarshal(tok, &s) != nil {
		return "", false
	}
	return s, true
}

// parseInt parses a JSON number token that is an integer fitting int64.
func parseInt(tok []byte) (int64, bool) {
	neg := len(tok) > 0 && tok[0] == '-'
	digits := tok
	if neg {
		digits = tok[1:]
	}
	if len(digits) == 0 || len(digits) > 19 {
		return 0, false
	}
	var n uint64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
	}
	if neg {
		if n > 1<<63 {
			return 0, false
		}
		return -int64(n), true
	}
	if n > 1<<63-1 {
		return 0, false
	}
	return int64(n), true
}

// splitObject fills r with the values of the envelope keys of b, which
// must be valid JSON. It reports false when b is not an object.
func splitObject(b []byte, r *rawRecord) bool {
	return eachMember(b, func(key, val []byte) bool {
		switch string(key) {
		case "type":
			r.typ = val
		case "seq":
			r.seq = val
		case "time":
			r.time = val
		case "seq0":
			r.seq0 = val
		case "time0":
			r.time0 = val
		case "data":
			r.data = val
		case "ignorable":
			r.ignorable = val
		case "sourceEventSeqs":
			r.sourceEventSeqs = val
		case "surfaceOp":
			r.surfaceOp = val
		}
		return true
	})
}

// eachMember calls yield with each key and raw value of the object b,
// which must be valid JSON, until yield returns false. It reports whether
// b is an object and yield never stopped.
func eachMember(b []byte, yield func(key, val []byte) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return true
	}
	for i < len(b) && b[i] == '"' {
		kEnd := skipString(b, i)
		key := b[i+1 : kEnd-1]
		if bytes.IndexByte(key, '\\') >= 0 { // an escaped key; never written by dsh
			var k string
			if json.Unmarshal(b[i:kEnd], &k) != nil {
				return false
			}
			key = []byte(k)
		}
		i = skipSpace(b, kEnd)
		if i >= len(b) || b[i] != ':' {
			return false
		}
		i = skipSpace(b, i+1)
		vEnd := skipValue(b, i)
		if vEnd <= i || !yield(key, b[i:vEnd]) {
			return false
		}
		i = skipSpace(b, vEnd)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			continue
		}
		return i < len(b) && b[i] == '}'
	}
	return false
}

// eachElem calls yield with each raw element of the array b, which must be
// valid JSON, until yield returns false. It reports whether b is an array
// and yield never stopped.
func eachElem(b []byte, yield func(val []byte) bool) bool {
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '[' {
		return false
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return true
	}
	for i < len(b) {
		vEnd := skipValue(b, i)
		if vEnd <= i || !yield(b[i:vEnd]) {
			return false
		}
		i = skipSpace(b, vEnd)
		if i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
			continue
		}
		return i < len(b) && b[i] == ']'
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
		i++
	}
	return i
}

// skipString returns the index after the string token starting at b[i].
func skipString(b []byte, i int) int {
	j := i + 1
	for {
		k := bytes.IndexByte(b[j:], '"')
		if k < 0 {
			return len(b)
		}
		j += k
		// The quote ends the string unless an odd number of backslashes
		// precede it.
		n := 0
		for p := j - 1; p > i && b[p] == '\\'; p-- {
			n++
		}
		j++
		if n%2 == 0 {
			return j
		}
	}
}

// skipValue returns the index after the JSON value starting at b[i].
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return i
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); {
			switch b[j] {
			case '"':
				j = skipString(b, j)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
			j++
		}
		return len(b)
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return j
		}
		j++
	}
	return j
}

// packedRow holds the raw tokens of a packed row's data.
type packedRow struct {
	turn, step, index, dt []byte
	texts, args, id, name []byte
}

// set sets the token of key to val; false for a key a packed row's
// data does not have.
func (p *packedRow) set(key, val []byte) bool {
	switch string(key) {
	case "turn":
		p.turn = val
	case "step":
		p.step = val
	case "index":
		p.index = val
	case "dt":
		p.dt = val
	case "texts":
		p.texts = val
	case "args":
		p.args = val
	case "id":
		p.id = val
	case "name":
		p.name = val
	default:
		return false
	}
	return true
}

// packed expands a text-chunks, reasoning-chunks or tool-call-chunks row.
func (d *recordDecoder) packed(r *rawRecord, tag string, kind deltaKind) error {
	switch {
	case r.seq0 == nil || r.time0 == nil:
		return d.errorf("%s row needs seq0 and time0", tag)
	case r.seq != nil || r.time != nil || r.ignorable != nil || r.sourceEventSeqs != nil || r.surfaceOp != nil:
		return d.errorf("%s row carries event fields (seq, time, ignorable, sourceEventSeqs or surfaceOp)", tag)
	case r.data == nil:
		return d.errorf("%s row has no data", tag)
	}
	seq0, ok := parseInt(r.seq0)
	if !ok {
		return d.errorf("%s seq0 must be an integer, got %.40s", tag, r.seq0)
	}
	time0, ok := parseInt(r.time0)
	if !ok {
		return d.errorf("%s time0 must be an integer, got %.40s", tag, r.time0)
	}
	p, membersTok, err := d.packedData(r.data, tag, kind)
	if err != nil {
		return err
	}
	members, gaps, err := d.packedMembers(membersTok, p.dt, tag)
	if err != nil {
		return err
	}
	if len(members) == 0 {
		return d.errorf("%s row has no members", tag)
	}
	if len(gaps) != len(members)-1 {
		return d.errorf("%s data.dt has %d gaps for %d members, want %d", tag, len(gaps), len(members), len(members)-1)
	}
	if err := d.checkSeq(seq0); err != nil {
		return err
	}
	dl := delta{kind: kind, turn: p.turn, step: p.step, index: p.index, id: p.id, name: p.name}
	return d.emitPacked(dl, time0, members, gaps, tag)
}

// emitPacked passes to fn one chunk event of dl per member, the first
// at time0 and each next one gap later; it checks every member's time
// before emitting any, so a bad row emits nothing.
func (d *recordDecoder) emitPacked(dl delta, time0 int64, members [][]byte, gaps []int64, tag string) error {
	t := time0
	for k := range members {
		if k > 0 {
			t += gaps[k-1]
		}
		if t < -maxSafeInteger || t > maxSafeInteger {
			return d.errorf("%s member %d time is not a safe integer", tag, k)
		}
	}
	t = time0
	for k, m := range members {
		if k > 0 {
			t += gaps[k-1]
		}
		dl.member = m
		data := dl.appendData(d.alloc(dl.dataLen()))
		e := persistence.Event{Type: chunkEventType, Seq: d.next, Time: t, Data: data}
		d.next++
		if err := d.fn(e); err != nil {
			return err
		}
	}
	return nil
}

// packedData reads a packed row's data object: its known keys, checked
// for kind, and the token of its members (texts, or args for tool calls).
func (d *recordDecoder) packedData(data []byte, tag string, kind deltaKind) (packedRow, []byte, error) {
	var p packedRow
	var unknown []byte
	isObject := eachMember(data, func(key, val []byte) bool {
		if !p.set(key, val) {
			unknown = key
			return false
		}
		return true
	})
	switch {
	case unknown != nil:
		return p, nil, d.errorf("%s data has the unknown key %q", tag, unknown)
	case !isObject:
		return p, nil, d.errorf("%s data must be an object", tag)
	case !isSafeUint(p.turn):
		return p, nil, d.errorf("%s data.turn must be a non-negative safe integer", tag)
	case !isSafeUint(p.step):
		return p, nil, d.errorf("%s data.step must be a non-negative safe integer", tag)
	case !isSafeUint(p.index):
		return p, nil, d.errorf("%s data.index must be a non-negative safe integer", tag)
	case p.dt == nil:
		return p, nil, d.errorf("%s data.dt is required", tag)
	}
	membersTok := p.texts
	if kind == toolCallDelta {
		switch {
		case p.texts != nil:
			return p, nil, d.errorf("%s data.texts is not allowed; tool calls carry args", tag)
		case !isStringToken(p.id) || string(p.id) == `""`:
			return p, nil, d.errorf("%s data.id must be a non-empty string", tag)
		case p.name != nil && (!isStringToken(p.name) || string(p.name) == `""`):
			return p, nil, d.errorf("%s data.name must be a non-empty string when present", tag)
		}
		membersTok = p.args
	} else if p.args != nil || p.id != nil || p.name != nil {
		return p, nil, d.errorf("%s data carries tool-call fields (id, name or args)", tag)
	}
	return p, membersTok, nil
}

// packedMembers reads a packed row's members (membersTok, an array of
// strings) and its time gaps (dt, an array of safe integers), into the
// decoder's reused slices.
func (d *recordDecoder) packedMembers(membersTok, dt []byte, tag string) ([][]byte, []int64, error) {
	members := d.members[:0]
	badMember := -1
	if membersTok == nil || !eachElem(membersTok, func(m []byte) bool {
		if !isStringToken(m) {
			badMember = len(members)
			return false
		}
		members = append(members, m)
		return true
	}) {
		if badMember >= 0 {
			return nil, nil, d.errorf("%s member %d must be a string", tag, badMember)
		}
		return nil, nil, d.errorf("%s members must be an array of strings", tag)
	}
	d.members = members
	gaps := d.gaps[:0]
	if !eachElem(dt, func(g []byte) bool {
		n, ok := parseInt(g)
		gaps = append(gaps, n)
		return ok && n >= -maxSafeInteger && n <= maxSafeInteger
	}) {
		return nil, nil, d.errorf("%s data.dt must be an array of safe integers", tag)
	}
	d.gaps = gaps
	return members, gaps, nil
}
