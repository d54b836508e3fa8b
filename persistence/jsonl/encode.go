package jsonl

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// Storage row tags. They are not event types: a line with one of these
// types is a packed run of assistant/chunk deltas (or, for "session", the
// header), so Append refuses events that carry them.
const (
	tagSession        = "session"
	tagTextChunks     = "text-chunks"
	tagReasoningChunk = "reasoning-chunks"
	tagToolCallChunks = "tool-call-chunks"
)

// chunkEventType is the event type that packed rows expand to.
const chunkEventType = "assistant/chunk"

// minPackedRun is the shortest run of deltas written as a packed row;
// shorter runs stay one event per line (dsh packs runs of three or more).
const minPackedRun = 3

// maxSafeInteger is the largest integer a dsh (JavaScript) reader keeps
// exact; packed row times and indexes must stay within it.
const maxSafeInteger = 1<<53 - 1

// isReservedType reports whether t is a storage row tag.
func isReservedType(t string) bool {
	switch t {
	case tagSession, tagTextChunks, tagReasoningChunk, tagToolCallChunks:
		return true
	}
	return false
}

// appendString appends s as a JSON string as dsh (JSON.stringify) writes
// it: see session.AppendJSONString.
func appendString(dst []byte, s string) []byte {
	return session.AppendJSONString(dst, s)
}

// appendEventLine appends e as one compact line (with its newline):
// {"type","seq","time","data"} and then the optional "ignorable",
// "sourceEventSeqs" and "surfaceOp". e must have passed checkEvent.
func appendEventLine(dst []byte, e *persistence.Event) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendString(dst, e.Type)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, e.Seq, 10)
	dst = append(dst, `,"time":`...)
	dst = strconv.AppendInt(dst, e.Time, 10)
	dst = append(dst, `,"data":`...)
	dst = append(dst, e.Data...)
	if e.Ignorable {
		dst = append(dst, `,"ignorable":true`...)
	}
	if len(e.SourceEventSeqs) > 0 {
		dst = append(dst, `,"sourceEventSeqs":[`...)
		for i, s := range e.SourceEventSeqs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = strconv.AppendInt(dst, s, 10)
		}
		dst = append(dst, ']')
	}
	if len(e.SurfaceOp) > 0 {
		dst = append(dst, `,"surfaceOp":`...)
		dst = append(dst, e.SurfaceOp...)
	}
	return append(dst, '}', '\n')
}

// ownJSON validates raw as one JSON value for the named field and returns
// it as dsh writes it (session.JSValue: the bytes JSON.stringify makes of
// the parsed value, compact, so a value can never break the one-line
// format), in a copy owned by the caller (so the caller's buffer may
// change after Append returns).
func ownJSON(raw json.RawMessage, field string) (json.RawMessage, error) {
	out, err := session.JSValue(raw)
	if err != nil {
		return nil, fmt.Errorf("%s is not a single valid JSON value: %w", field, err)
	}
	return out, nil
}

// ownEvent checks e (everything but its seq) and returns a copy whose
// slices the store owns, with Data and SurfaceOp compacted.
func ownEvent(e persistence.Event) (persistence.Event, error) {
	if e.Type == "" {
		return e, errors.New("type must be non-empty")
	}
	if !utf8.ValidString(e.Type) {
		return e, fmt.Errorf("type %q is not valid UTF-8", e.Type)
	}
	if isReservedType(e.Type) {
		return e, fmt.Errorf("type %q is a storage row tag, not an event type", e.Type)
	}
	if len(e.Data) == 0 {
		return e, errors.New("data is required (use null for no payload)")
	}
	var err error
	if e.Data, err = ownJSON(e.Data, "data"); err != nil {
		return e, err
	}
	if e.SurfaceOp != nil {
		if e.SurfaceOp, err = ownJSON(e.SurfaceOp, "surfaceOp"); err != nil {
			return e, err
		}
	}
	if len(e.SourceEventSeqs) > 0 {
		e.SourceEventSeqs = append([]int64(nil), e.SourceEventSeqs...)
	} else {
		e.SourceEventSeqs = nil
	}
	return e, nil
}

// deltaKind is the packed row a chunk delta belongs to.
type deltaKind uint8

const (
	notDelta deltaKind = iota
	textDelta
	reasoningDelta
	toolCallDelta
)

func (k deltaKind) rowTag() string {
	switch k {
	case textDelta:
		return tagTextChunks
	case reasoningDelta:
		return tagReasoningChunk
	default:
		return tagToolCallChunks
	}
}

func (k deltaKind) chunkType() string {
	switch k {
	case textDelta:
		return "text-delta"
	case reasoningDelta:
		return "reasoning-delta"
	default:
		return "tool-call-delta"
	}
}

// delta holds the raw JSON tokens of one packable assistant/chunk delta.
// Turn, step and index are canonical non-negative integers; member is the
// text or argumentsDelta string token; id and name (nil when absent) are
// string tokens of tool-call deltas.
type delta struct {
	kind              deltaKind
	turn, step, index []byte
	id, name          []byte
	member            []byte
}

// sameRun reports whether b continues a's packed row.
func (a *delta) sameRun(b *delta) bool {
	return a.kind == b.kind && bytes.Equal(a.turn, b.turn) && bytes.Equal(a.step, b.step) &&
		bytes.Equal(a.index, b.index) && bytes.Equal(a.id, b.id) &&
		(a.name == nil) == (b.name == nil) && bytes.Equal(a.name, b.name)
}

// appendData appends the expanded event data of d:
// {"turn","step","chunk":{"type","index","text"}} or, for tool calls,
// {"turn","step","chunk":{"type","index","id","name"?,"argumentsDelta"}}.
func (d *delta) appendData(dst []byte) []byte {
	dst = append(dst, `{"turn":`...)
	dst = append(dst, d.turn...)
	dst = append(dst, `,"step":`...)
	dst = append(dst, d.step...)
	dst = append(dst, `,"chunk":{"type":"`...)
	dst = append(dst, d.kind.chunkType()...)
	dst = append(dst, `","index":`...)
	dst = append(dst, d.index...)
	if d.kind == toolCallDelta {
		dst = append(dst, `,"id":`...)
		dst = append(dst, d.id...)
		if d.name != nil {
			dst = append(dst, `,"name":`...)
			dst = append(dst, d.name...)
		}
		dst = append(dst, `,"argumentsDelta":`...)
	} else {
		dst = append(dst, `,"text":`...)
	}
	dst = append(dst, d.member...)
	return append(dst, '}', '}')
}

func (d *delta) dataLen() int {
	n := len(`{"turn":,"step":,"chunk":{"type":"","index":,"text":}}`) + len(d.turn) + len(d.step) +
		len(d.kind.chunkType()) + len(d.index) + len(d.member)
	if d.kind == toolCallDelta {
		n += len(`,"id":,"argumentsDelta":`) - len(`,"text":`) + len(d.id)
		if d.name != nil {
			n += len(`,"name":`) + len(d.name)
		}
	}
	return n
}

// isSafeUint reports whether raw is a canonical JSON integer in
// [0, 2^53-1]: digits only, no leading zero.
func isSafeUint(raw []byte) bool {
	if len(raw) == 0 || len(raw) > 16 || raw[0] == '0' && len(raw) > 1 {
		return false
	}
	var n int64
	for _, c := range raw {
		if c < '0' || c > '9' {
			return false
		}
		n = n*10 + int64(c-'0')
	}
	return n <= maxSafeInteger
}

// isStringToken reports whether raw (a valid JSON value) is a string.
func isStringToken(raw []byte) bool { return len(raw) >= 2 && raw[0] == '"' }

// wireChunkEvent is the data of an assistant/chunk delta, kept as raw
// tokens so that a packed row reproduces the event byte for byte.
type wireChunkEvent struct {
	Turn  json.RawMessage `json:"turn"`
	Step  json.RawMessage `json:"step"`
	Chunk struct {
		Type           json.RawMessage `json:"type"`
		Index          json.RawMessage `json:"index"`
		Text           json.RawMessage `json:"text"`
		ID             json.RawMessage `json:"id"`
		Name           json.RawMessage `json:"name"`
		ArgumentsDelta json.RawMessage `json:"argumentsDelta"`
	} `json:"chunk"`
}

// plainDelta reports whether e may be a delta a packed row holds: an
// assistant/chunk event with a safe time and none of the optional
// envelope fields, whose data mentions a delta.
func plainDelta(e *persistence.Event) bool {
	return e.Type == chunkEventType && !e.Ignorable && len(e.SourceEventSeqs) == 0 && e.SurfaceOp == nil &&
		e.Time >= -maxSafeInteger && e.Time <= maxSafeInteger && bytes.Contains(e.Data, []byte(`-delta"`))
}

// packable returns e as a delta when a packed row reproduces it exactly:
// an assistant/chunk text, reasoning or tool-call delta without optional
// envelope fields whose data is byte-identical to the expanded form.
// e.Data must already be compact.
func packable(e *persistence.Event) (delta, bool) {
	if !plainDelta(e) {
		return delta{}, false
	}
	var w wireChunkEvent
	if json.Unmarshal(e.Data, &w) != nil {
		return delta{}, false
	}
	d := delta{turn: w.Turn, step: w.Step, index: w.Chunk.Index}
	switch string(w.Chunk.Type) {
	case `"text-delta"`:
		d.kind, d.member = textDelta, w.Chunk.Text
	case `"reasoning-delta"`:
		d.kind, d.member = reasoningDelta, w.Chunk.Text
	case `"tool-call-delta"`:
		d.kind, d.member, d.id, d.name = toolCallDelta, w.Chunk.ArgumentsDelta, w.Chunk.ID, w.Chunk.Name
		if !isStringToken(d.id) || string(d.id) == `""` || d.name != nil && (!isStringToken(d.name) || string(d.name) == `""`) {
			return delta{}, false
		}
	default:
		return delta{}, false
	}
	if !isSafeUint(d.turn) || !isSafeUint(d.step) || !isSafeUint(d.index) || !isStringToken(d.member) {
		return delta{}, false
	}
	// The exact-bytes check rejects extra keys, other key orders and
	// fields that do not belong to the kind (a "text" on a tool call).
	buf := make([]byte, 0, d.dataLen())
	if !bytes.Equal(d.appendData(buf), e.Data) {
		return delta{}, false
	}
	return d, true
}

// appendBatch appends the lines of events. With packed set, runs of at
// least minPackedRun consecutive deltas of the same block become one
// packed row.
func appendBatch(dst []byte, events []persistence.Event, packed bool) []byte {
	if !packed {
		for i := range events {
			dst = appendEventLine(dst, &events[i])
		}
		return dst
	}
	var run []delta
	start := 0 // index in events of run[0]
	flush := func(end int) {
		if len(run) >= minPackedRun {
			dst = appendPackedRow(dst, events[start:end], run)
		} else {
			for i := start; i < end; i++ {
				dst = appendEventLine(dst, &events[i])
			}
		}
		run = run[:0]
	}
	for i := range events {
		d, ok := packable(&events[i])
		if !ok {
			flush(i)
			dst = appendEventLine(dst, &events[i])
			start = i + 1
			continue
		}
		if len(run) > 0 && (!run[0].sameRun(&d) || !safeGap(events[i-1].Time, events[i].Time)) {
			flush(i)
		}
		if len(run) == 0 {
			start = i
		}
		run = append(run, d)
	}
	flush(len(events))
	return dst
}

// safeGap reports whether next-prev is exact and a safe integer.
func safeGap(prev, next int64) bool {
	g := next - prev
	return g >= -maxSafeInteger && g <= maxSafeInteger
}

// appendPackedRow appends one packed row for the events of run.
func appendPackedRow(dst []byte, events []persistence.Event, run []delta) []byte {
	d := &run[0]
	dst = append(dst, `{"type":"`...)
	dst = append(dst, d.kind.rowTag()...)
	dst = append(dst, `","seq0":`...)
	dst = strconv.AppendInt(dst, events[0].Seq, 10)
	dst = append(dst, `,"time0":`...)
	dst = strconv.AppendInt(dst, events[0].Time, 10)
	dst = append(dst, `,"data":{"turn":`...)
	dst = append(dst, d.turn...)
	dst = append(dst, `,"step":`...)
	dst = append(dst, d.step...)
	dst = append(dst, `,"index":`...)
	dst = append(dst, d.index...)
	dst = append(dst, `,"dt":[`...)
	for i := 1; i < len(events); i++ {
		if i > 1 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, events[i].Time-events[i-1].Time, 10)
	}
	dst = append(dst, ']')
	if d.kind == toolCallDelta {
		dst = append(dst, `,"id":`...)
		dst = append(dst, d.id...)
		if d.name != nil {
			dst = append(dst, `,"name":`...)
			dst = append(dst, d.name...)
		}
		dst = append(dst, `,"args":[`...)
	} else {
		dst = append(dst, `,"texts":[`...)
	}
	for i := range run {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, run[i].member...)
	}
	return append(dst, ']', '}', '}', '\n')
}
