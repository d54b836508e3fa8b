package jsonl

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

const testHeader = `{"type":"session","version":0,"id":"s-1","createdAt":5,"cwd":"/w","delegationDepth":0}`

// ev is a plain event line with the given seq.
func ev(seq string) string {
	return `{"type":"turn/start","seq":` + seq + `,"time":10,"data":{"turn":1}}`
}

func scanAll(raw []byte) (session.Header, []persistence.Event, error) {
	var events []persistence.Event
	h, err := Scan(bytes.NewReader(raw), func(e persistence.Event) error {
		events = append(events, e)
		return nil
	})
	return h, events, err
}

func TestScanPlainCases(t *testing.T) {
	lines := func(ls ...string) string { return strings.Join(ls, "\n") }
	tests := []struct {
		name       string
		raw        string
		wantEvents int
		wantErr    string // substring; "" means no error
		wantGap    bool
	}{
		{"header only", testHeader + "\n", 0, "", false},
		{"two events", lines(testHeader, ev("0"), ev("1"), ""), 2, "", false},
		{"torn final line dropped", lines(testHeader, ev("0"), `{"type":"turn/st`), 1, "", false},
		{"final line without newline dropped", lines(testHeader, ev("0"), ev("1")), 1, "", false},
		{"invalid final line dropped", lines(testHeader, ev("0"), `{"type":`, ""), 1, "", false},
		{"blank final line dropped", lines(testHeader, ev("0"), "", ""), 1, "", false},
		{"invalid middle line", lines(testHeader, ev("0"), `{"type":`, ev("1"), ""), 0, "line 3: not valid JSON", false},
		{"invalid line before torn tail", lines(testHeader, ev("0"), `garbage`, `{"ty`), 0, "line 3: not valid JSON", false},
		{"blank middle line", lines(testHeader, "", ev("0"), ""), 0, "line 2: not valid JSON", false},
		{"seq gap", lines(testHeader, ev("0"), ev("2"), ""), 0, "line 3: seq 2, want 1", true},
		{"seq gap on final line is not torn", lines(testHeader, ev("0"), ev("5"), ""), 0, "line 3", true},
		{"first seq not 0", lines(testHeader, ev("1"), ""), 0, "line 2: seq 1, want 0", true},
		{"duplicate seq", lines(testHeader, ev("0"), ev("0"), ""), 0, "line 3", true},
		{"empty file", "", 0, "no session header", false},
		{"torn header", `{"type":"session","version":0`, 0, "torn session header", false},
		{"bad header", `{"type":"session","version":1,"id":"x","createdAt":1}` + "\n", 0, "line 1", false},
		{"event as header", ev("0") + "\n", 0, "line 1", false},
		{"second header", lines(testHeader, testHeader, ""), 0, "line 2: unexpected second session header", false},
		{"missing seq", lines(testHeader, `{"type":"x","time":1,"data":1}`, ""), 0, `line 2: event "x" has no seq`, false},
		{"missing time", lines(testHeader, `{"type":"x","seq":0,"data":1}`, ""), 0, `line 2: event "x" has no time`, false},
		{"missing data", lines(testHeader, `{"type":"x","seq":0,"time":1}`, ""), 0, `line 2: event "x" has no data`, false},
		{"missing type", lines(testHeader, `{"seq":0,"time":1,"data":1}`, ""), 0, "line 2: record has no type", false},
		{"fractional seq", lines(testHeader, `{"type":"x","seq":0.5,"time":1,"data":1}`, ""), 0, "line 2", false},
		{"array line", lines(testHeader, `[1]`, ""), 0, "line 2", false},
		{"packed row", lines(testHeader, `{"type":"text-chunks","seq0":0,"time0":100,"data":{"turn":1,"step":2,"index":0,"dt":[1,2],"texts":["a","b","c"]}}`, ""), 3, "", false},
		{"packed row gap", lines(testHeader, ev("0"), `{"type":"text-chunks","seq0":2,"time0":100,"data":{"turn":1,"step":2,"index":0,"dt":[],"texts":["a"]}}`, ""), 0, "line 3: seq 2, want 1", true},
		{"packed dt too short", lines(testHeader, `{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":2,"index":0,"dt":[1],"texts":["a","b","c"]}}`, ""), 0, "dt has 1 gaps for 3 members", false},
		{"packed no members", lines(testHeader, `{"type":"reasoning-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":2,"index":0,"dt":[],"texts":[]}}`, ""), 0, "no members", false},
		{"packed unknown key", lines(testHeader, `{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":2,"index":0,"dt":[],"texts":["a"],"extra":1}}`, ""), 0, `unknown key "extra"`, false},
		{"packed non-string member", lines(testHeader, `{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":2,"index":0,"dt":[],"texts":[1]}}`, ""), 0, "member 0 must be a string", false},
		{"packed negative index", lines(testHeader, `{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":2,"index":-1,"dt":[],"texts":["a"]}}`, ""), 0, "data.index", false},
		{"packed with seq", lines(testHeader, `{"type":"text-chunks","seq":0,"seq0":0,"time0":1,"data":{"turn":1,"step":2,"index":0,"dt":[],"texts":["a"]}}`, ""), 0, "carries event fields", false},
		{"packed without seq0", lines(testHeader, `{"type":"text-chunks","time0":1,"data":{"turn":1,"step":2,"index":0,"dt":[],"texts":["a"]}}`, ""), 0, "needs seq0 and time0", false},
		{"packed dt not integers", lines(testHeader, `{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":2,"index":0,"dt":[0.5],"texts":["a","b"]}}`, ""), 0, "dt must be an array of safe integers", false},
		{"packed texts not array", lines(testHeader, `{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":2,"index":0,"dt":[],"texts":"a"}}`, ""), 0, "members must be an array", false},
		{"packed data not object", lines(testHeader, `{"type":"text-chunks","seq0":0,"time0":1,"data":[1]}`, ""), 0, "data must be an object", false},
		{"tool chunks without id", lines(testHeader, `{"type":"tool-call-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":2,"index":0,"dt":[],"args":["{"]}}`, ""), 0, "data.id", false},
		{"tool chunks empty name", lines(testHeader, `{"type":"tool-call-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":2,"index":0,"dt":[],"id":"c","name":"","args":["{"]}}`, ""), 0, "data.name", false},
		{"tool chunks with texts", lines(testHeader, `{"type":"tool-call-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":2,"index":0,"dt":[],"id":"c","texts":["a"],"args":["{"]}}`, ""), 0, "texts is not allowed", false},
		{"text chunks with id", lines(testHeader, `{"type":"text-chunks","seq0":0,"time0":1,"data":{"turn":1,"step":2,"index":0,"dt":[],"id":"c","texts":["a"]}}`, ""), 0, "tool-call fields", false},
		{"unsafe packed time", lines(testHeader, `{"type":"text-chunks","seq0":0,"time0":9007199254740991,"data":{"turn":1,"step":2,"index":0,"dt":[1],"texts":["a","b"]}}`, ""), 0, "member 1 time", false},
	}
	for _, tt := range tests {
		_, events, err := scanAll([]byte(tt.raw))
		if tt.wantErr == "" {
			if err != nil || len(events) != tt.wantEvents {
				t.Errorf("%s: Scan() = %d events, %v; want %d events, nil", tt.name, len(events), err, tt.wantEvents)
			}
			for i, e := range events {
				if e.Seq != int64(i) {
					t.Errorf("%s: event %d has seq %d", tt.name, i, e.Seq)
				}
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: Scan() = %v, want an error containing %q", tt.name, err, tt.wantErr)
			continue
		}
		if errors.Is(err, persistence.ErrSeqGap) != tt.wantGap {
			t.Errorf("%s: errors.Is(%v, ErrSeqGap) = %v, want %v", tt.name, err, !tt.wantGap, tt.wantGap)
		}
	}
}

func TestScanExpandsPackedRows(t *testing.T) {
	raw := testHeader + "\n" +
		ev("0") + "\n" +
		`{"type":"text-chunks","seq0":1,"time0":100,"data":{"turn":1,"step":2,"index":1,"dt":[0,5],"texts":["a","\"b\"","<c&>"]}}` + "\n" +
		`{"type":"tool-call-chunks","seq0":4,"time0":200,"data":{"turn":1,"step":2,"index":2,"dt":[3],"id":"call_1","name":"bash","args":["{\"cmd\"",":1}"]}}` + "\n" +
		`{"type":"tool-call-chunks","seq0":6,"time0":300,"data":{"turn":1,"step":2,"index":3,"dt":[],"id":"call_2","args":["{}"]}}` + "\n" +
		`{"type":"reasoning-chunks","seq0":7,"time0":400,"data":{"turn":2,"step":1,"index":0,"dt":[-1],"texts":["x","y"]}}` + "\n"
	_, events, err := scanAll([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		time int64
		data string
	}{
		{10, `{"turn":1}`},
		{100, `{"turn":1,"step":2,"chunk":{"type":"text-delta","index":1,"text":"a"}}`},
		{100, `{"turn":1,"step":2,"chunk":{"type":"text-delta","index":1,"text":"\"b\""}}`},
		{105, `{"turn":1,"step":2,"chunk":{"type":"text-delta","index":1,"text":"<c&>"}}`},
		{200, `{"turn":1,"step":2,"chunk":{"type":"tool-call-delta","index":2,"id":"call_1","name":"bash","argumentsDelta":"{\"cmd\""}}`},
		{203, `{"turn":1,"step":2,"chunk":{"type":"tool-call-delta","index":2,"id":"call_1","name":"bash","argumentsDelta":":1}"}}`},
		{300, `{"turn":1,"step":2,"chunk":{"type":"tool-call-delta","index":3,"id":"call_2","argumentsDelta":"{}"}}`},
		{400, `{"turn":2,"step":1,"chunk":{"type":"reasoning-delta","index":0,"text":"x"}}`},
		{399, `{"turn":2,"step":1,"chunk":{"type":"reasoning-delta","index":0,"text":"y"}}`},
	}
	if len(events) != len(want) {
		t.Fatalf("Scan() = %d events, want %d", len(events), len(want))
	}
	for i, w := range want {
		e := events[i]
		wantType := "assistant/chunk"
		if i == 0 {
			wantType = "turn/start"
		}
		if e.Seq != int64(i) || e.Time != w.time || string(e.Data) != w.data || e.Type != wantType {
			t.Errorf("event %d = {%s %d %d %s}, want {%s %d %d %s}", i, e.Type, e.Seq, e.Time, e.Data, wantType, i, w.time, w.data)
		}
	}
}

func TestScanPreservesUnknownTypes(t *testing.T) {
	raw := testHeader + "\n" +
		`{"type":"plugin/future-thing","seq":0,"time":7,"data":{"nested":[1,{"a":null}]},"ignorable":true,"sourceEventSeqs":[3,4],"surfaceOp":{"op":"replace"},"futureKey":1}` + "\n" +
		`{"type":"another/unknown","seq":1,"time":8,"data":"text","sourceEventSeqs":[]}` + "\n"
	_, events, err := scanAll([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	want := []persistence.Event{
		{Type: "plugin/future-thing", Seq: 0, Time: 7, Data: []byte(`{"nested":[1,{"a":null}]}`), Ignorable: true, SourceEventSeqs: []int64{3, 4}, SurfaceOp: []byte(`{"op":"replace"}`)},
		{Type: "another/unknown", Seq: 1, Time: 8, Data: []byte(`"text"`)},
	}
	sameEvents(t, events, want)
}

func TestScanHeaderWithoutDelegationDepth(t *testing.T) {
	h, _, err := scanAll([]byte(`{"type":"session","version":0,"id":"old","createdAt":1,"parentSession":"p","origin":"subagent"}` + "\n"))
	if err != nil || h.DelegationDepth != 0 || h.ID != "old" || h.Origin != "subagent" {
		t.Fatalf("Scan(old header) = %+v, %v; want id old, depth 0, origin subagent", h, err)
	}
}

func TestScanStopsOnCallbackError(t *testing.T) {
	raw := testHeader + "\n" + ev("0") + "\n" + ev("1") + "\n"
	stop := errors.New("stop")
	n := 0
	_, err := Scan(strings.NewReader(raw), func(persistence.Event) error { n++; return stop })
	if err != stop || n != 1 {
		t.Fatalf("Scan() = %v after %d calls, want the callback's error after 1", err, n)
	}
}

func TestScanLongLine(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	raw := testHeader + "\n" + `{"type":"big","seq":0,"time":1,"data":"` + big + `"}` + "\n"
	_, events, err := scanAll([]byte(raw))
	if err != nil || len(events) != 1 || len(events[0].Data) != len(big)+2 {
		t.Fatalf("Scan(1 MiB line) = %d events, %v", len(events), err)
	}
}

// zstdLog builds a zstd log from frames of the given contents.
func zstdLog(t *testing.T, frames ...string) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true))
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, f := range frames {
		out = enc.EncodeAll([]byte(f), out)
	}
	return out
}

func TestScanZstdCases(t *testing.T) {
	h := testHeader + "\n"
	b1 := ev("0") + "\n" + ev("1") + "\n"
	b2 := ev("2") + "\n"
	good := zstdLog(t, h, b1, b2)
	twoFrames := zstdLog(t, h, b1)
	corruptLast := bytes.Clone(good)
	corruptLast[len(corruptLast)-1] ^= 0xFF // checksum of the last frame
	corruptMiddle := bytes.Clone(good)
	corruptMiddle[len(twoFrames)-1] ^= 0xFF // checksum of the first batch frame
	skippable := append(zstdLog(t, h), 0x50, 0x2A, 0x4D, 0x18, 3, 0, 0, 0, 'a', 'b', 'c')
	skippable = append(skippable, zstdLog(t, b1)...)
	tests := []struct {
		name       string
		raw        []byte
		wantEvents int
		wantErr    string
		wantGap    bool
	}{
		{"three frames", good, 3, "", false},
		{"header frame only", zstdLog(t, h), 0, "", false},
		{"torn final frame dropped", good[:len(good)-3], 2, "", false},
		{"torn final magic dropped", append(bytes.Clone(twoFrames), 0x28, 0xB5), 2, "", false},
		{"corrupt final frame dropped", corruptLast, 2, "", false},
		{"corrupt middle frame", corruptMiddle, 0, "zstd frame 2", false},
		{"garbage after frames", append(bytes.Clone(good), "garbage!"...), 0, "bad zstd magic", false},
		{"final frame with invalid JSON dropped", zstdLog(t, h, b1, "{not json\n"), 2, "", false},
		{"middle frame with invalid JSON", zstdLog(t, h, "{not json\n", b1), 0, "not valid JSON", false},
		{"final frame without newline dropped", zstdLog(t, h, b1, ev("2")), 2, "", false},
		{"gap in final frame", zstdLog(t, h, b1, ev("3")+"\n"), 0, "line 4: seq 3, want 2", true},
		{"header frame with events", zstdLog(t, h+b1), 0, "exactly the header line", false},
		{"torn header frame", zstdLog(t, h)[:10], 0, "frame 1", false},
		{"skippable frame", skippable, 2, "", false},
	}
	for _, tt := range tests {
		_, events, err := scanAll(tt.raw)
		if tt.wantErr == "" {
			if err != nil || len(events) != tt.wantEvents {
				t.Errorf("%s: Scan() = %d events, %v; want %d, nil", tt.name, len(events), err, tt.wantEvents)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: Scan() = %v, want an error containing %q", tt.name, err, tt.wantErr)
			continue
		}
		if errors.Is(err, persistence.ErrSeqGap) != tt.wantGap {
			t.Errorf("%s: errors.Is(%v, ErrSeqGap) = %v, want %v", tt.name, err, !tt.wantGap, tt.wantGap)
		}
	}
}

func TestReadFileDetectsFormat(t *testing.T) {
	dir := t.TempDir()
	plain := []byte(testHeader + "\n" + ev("0") + "\n")
	z := zstdLog(t, testHeader+"\n", ev("0")+"\n")
	tests := []struct {
		name    string
		data    []byte
		wantErr bool
	}{
		{"session.jsonl", plain, false},
		{"session.jsonl.zstd", z, false},
		{"zstd-without-suffix.jsonl", z, false},
		{"plain-with-zstd-suffix.jsonl.zstd", plain, true},
	}
	for _, tt := range tests {
		p := filepath.Join(dir, tt.name)
		if err := os.WriteFile(p, tt.data, 0o600); err != nil {
			t.Fatal(err)
		}
		log, err := ReadFile(p)
		if (err != nil) != tt.wantErr {
			t.Errorf("ReadFile(%s) = %v, want error %v", tt.name, err, tt.wantErr)
			continue
		}
		if err == nil && (log.Header.ID != "s-1" || len(log.Events) != 1) {
			t.Errorf("ReadFile(%s) = %+v, want header s-1 and 1 event", tt.name, log)
		}
	}
	if _, err := ReadFile(filepath.Join(dir, "missing.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("ReadFile(missing) = %v, want ErrNotExist", err)
	}
}
