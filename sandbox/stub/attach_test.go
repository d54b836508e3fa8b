package stub

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestFrames(t *testing.T) {
	var b bytes.Buffer
	if err := WriteFrames(&b, FrameStdout, bytes.Repeat([]byte("x"), MaxFrame+3)); err != nil {
		t.Fatal(err)
	}
	if err := WriteFrames(&b, FrameSignal, SignalFrame(15)); err != nil {
		t.Fatal(err)
	}
	if err := WriteFrames(&b, FrameReport, Report{Kind: Exited, Value: 7 << 8}.Encode()); err != nil {
		t.Fatal(err)
	}
	f, err := ReadFrame(&b)
	if err != nil || f.Kind != FrameStdout || len(f.Data) != MaxFrame {
		t.Fatalf("first frame: %v kind %q len %d", err, f.Kind, len(f.Data))
	}
	if f, err = ReadFrame(&b); err != nil || len(f.Data) != 3 {
		t.Fatalf("second frame: %v len %d", err, len(f.Data))
	}
	if f, err = ReadFrame(&b); err != nil {
		t.Fatal(err)
	}
	if sig, err := FrameSignalNumber(f); err != nil || sig != 15 {
		t.Errorf("signal %d %v", sig, err)
	}
	if f, err = ReadFrame(&b); err != nil {
		t.Fatal(err)
	}
	if r, err := FrameReportValue(f); err != nil || r.Kind != Exited || r.Value != 7<<8 {
		t.Errorf("report %+v %v", r, err)
	}
	if _, err := ReadFrame(&b); !errors.Is(err, io.EOF) {
		t.Errorf("at the end: %v, want io.EOF", err)
	}
}

func TestReadFrameRefuses(t *testing.T) {
	for name, in := range map[string][]byte{
		"short header": {'o', 0, 0},
		"padding":      {'o', 1, 0, 0, 0, 0, 0, 0},
		"too long":     {'o', 0, 0, 0, 0x00, 0x10, 0x00, 0x01},
		"short body":   {'o', 0, 0, 0, 0, 0, 0, 5, 'a'},
	} {
		if _, err := ReadFrame(bytes.NewReader(in)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
	if _, err := FrameSignalNumber(Frame{Kind: FrameSignal, Data: SignalFrame(0)}); err == nil {
		t.Error("signal 0 accepted")
	}
	if _, err := FrameSignalNumber(Frame{Kind: FrameSignal, Data: []byte{1}}); err == nil {
		t.Error("a 1-byte signal frame accepted")
	}
}

func FuzzReadFrame(f *testing.F) {
	f.Add(AppendFrame(nil, FrameStdin, []byte("hi")))
	f.Add([]byte{'s', 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 9})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		for {
			fr, err := ReadFrame(r)
			if err != nil {
				return
			}
			if len(fr.Data) > MaxFrame {
				t.Fatalf("frame of %d bytes", len(fr.Data))
			}
			_, _ = FrameSignalNumber(fr)
			_, _ = FrameReportValue(fr)
		}
	})
}

// TestEscapeRoundTrip: escaped output holds no newline and reads back
// as written, however the reads split it; a broken escape is refused.
func TestEscapeRoundTrip(t *testing.T) {
	in := []byte("line 1\nline 2\n\xfe\xfe\n\xfen tail")
	var b bytes.Buffer
	w := NewEscaper(&b)
	for _, part := range [][]byte{in[:3], in[3:9], in[9:]} {
		if n, err := w.Write(part); err != nil || n != len(part) {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if bytes.IndexByte(b.Bytes(), '\n') >= 0 {
		t.Fatalf("escaped %q holds a newline", b.Bytes())
	}
	out, err := io.ReadAll(io.LimitReader(NewUnescaper(iotest.OneByteReader(&b)), 1<<20))
	if err != nil || !bytes.Equal(out, in) {
		t.Fatalf("unescaped = %q, %v; want %q", out, err, in)
	}
	for _, bad := range []string{"ab\xfe", "ab\xfex"} {
		if _, err := io.ReadAll(NewUnescaper(strings.NewReader(bad))); !errors.Is(err, ErrMalformed) {
			t.Errorf("unescape %q: err %v, want ErrMalformed", bad, err)
		}
	}
}

func FuzzEscape(f *testing.F) {
	f.Add([]byte("a\nb\xfe"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var b bytes.Buffer
		if _, err := NewEscaper(&b).Write(in); err != nil {
			t.Fatal(err)
		}
		if bytes.IndexByte(b.Bytes(), '\n') >= 0 {
			t.Fatalf("escaped %q holds a newline", b.Bytes())
		}
		out, err := io.ReadAll(NewUnescaper(&b))
		if err != nil || !bytes.Equal(out, in) {
			t.Fatalf("round trip of %q = %q, %v", in, out, err)
		}
		// Any input unescapes to something or fails cleanly.
		_, _ = io.ReadAll(NewUnescaper(bytes.NewReader(in)))
	})
}
