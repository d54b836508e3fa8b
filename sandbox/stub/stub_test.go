package stub

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
	"time"
)

func sample() *Command {
	return &Command{
		Argv:     []string{"/bin/bash", "-c", "echo 'hi'"},
		Env:      []string{"PATH=/usr/bin:/bin", "EMPTY=", "X=a=b"},
		Dir:      "/work space",
		Deadline: 90 * time.Second,
		Terminal: true,
	}
}

func TestCallRoundTrip(t *testing.T) {
	for _, c := range []*Command{sample(), {Argv: []string{"true"}, Dir: "/", Deadline: 1}} {
		b, err := c.Encode()
		if err != nil {
			t.Fatalf("Encode(%+v): %v", c, err)
		}
		got, err := ReadCall(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("ReadCall: %v", err)
		}
		if c.Env == nil {
			c.Env = []string{}
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("ReadCall(Encode(%+v)) = %+v", c, got)
		}
	}
}

func TestReadCallReadsExactlyOneMessage(t *testing.T) {
	b, _ := sample().Encode()
	r := bytes.NewReader(append(b, "more"...))
	if _, err := ReadCall(r); err != nil {
		t.Fatal(err)
	}
	if r.Len() != 4 {
		t.Errorf("ReadCall consumed past its message: %d bytes left, want 4", r.Len())
	}
}

func TestReadCallEOF(t *testing.T) {
	if _, err := ReadCall(bytes.NewReader(nil)); !errors.Is(err, io.EOF) {
		t.Errorf("ReadCall(empty) = %v, want io.EOF", err)
	}
}

func TestEncodeRefuses(t *testing.T) {
	for name, c := range map[string]*Command{
		"no argv":       {Dir: "/", Deadline: 1},
		"empty argv0":   {Argv: []string{""}, Dir: "/", Deadline: 1},
		"relative dir":  {Argv: []string{"x"}, Dir: "tmp", Deadline: 1},
		"no deadline":   {Argv: []string{"x"}, Dir: "/"},
		"nul in argv":   {Argv: []string{"x", "a\x00b"}, Dir: "/", Deadline: 1},
		"env no equals": {Argv: []string{"x"}, Env: []string{"FOO"}, Dir: "/", Deadline: 1},
		"nul in env":    {Argv: []string{"x"}, Env: []string{"A=\x00"}, Dir: "/", Deadline: 1},
		"too large":     {Argv: []string{"x", string(make([]byte, MaxCall))}, Dir: "/", Deadline: 1},
	} {
		if _, err := c.Encode(); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: Encode = %v, want ErrMalformed", name, err)
		}
	}
	// The legitimate variant of each passes.
	if _, err := (&Command{Argv: []string{"x", "a b"}, Env: []string{"A="}, Dir: "/", Deadline: 1}).Encode(); err != nil {
		t.Errorf("Encode(valid) = %v", err)
	}
}

func TestReadCallRefusesMalformed(t *testing.T) {
	good, _ := sample().Encode()
	mut := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for name, b := range map[string][]byte{
		"bad magic":     mut(func(b []byte) []byte { b[0] = 'X'; return b }),
		"huge length":   mut(func(b []byte) []byte { b[4] = 0xff; return b }),
		"truncated":     good[:len(good)-1],
		"short header":  good[:5],
		"bad version":   mut(func(b []byte) []byte { b[8] = 9; return b }),
		"unknown flags": mut(func(b []byte) []byte { b[9] = 0x80; return b }),
		"trailing byte": mut(func(b []byte) []byte { b[7]++; return append(b, 0) }),
		"huge count": mut(func(b []byte) []byte {
			// the argument count follows version, flags, deadline and dir
			i := 8 + 1 + 1 + 8 + 4 + len("/work space")
			copy(b[i:], []byte{0x7f, 0xff, 0xff, 0xff})
			return b
		}),
	} {
		if _, err := ReadCall(bytes.NewReader(b)); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: ReadCall = %v, want ErrMalformed", name, err)
		}
	}
}

func TestReportRoundTrip(t *testing.T) {
	for _, r := range []Report{{Ready, 0}, {Started, 2}, {Exited, 0x8f}, {Failed, 127}, {Expired, 0}, {Exited, -1}} {
		got, err := ReadReport(bytes.NewReader(r.Encode()))
		if err != nil || got != r {
			t.Errorf("ReadReport(Encode(%v)) = %v, %v", r, got, err)
		}
	}
	if _, err := ReadReport(bytes.NewReader([]byte{'Z', 0, 0, 0, 0, 0, 0, 0})); err == nil {
		t.Error("ReadReport(kind Z) = nil error")
	}
	if _, err := ReadReport(bytes.NewReader([]byte{'S', 1, 0, 0, 0, 0, 0, 0})); err == nil {
		t.Error("ReadReport(nonzero padding) = nil error")
	}
}

// FuzzReadCall: the decoder never panics, never allocates beyond its
// input, and what it accepts encodes back to the same message.
func FuzzReadCall(f *testing.F) {
	good, _ := sample().Encode()
	f.Add(good)
	f.Add([]byte("DSHC\x00\x00\x00\x00"))
	f.Add(good[:20])
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := ReadCall(bytes.NewReader(b))
		if err != nil {
			return
		}
		again, err := c.Encode()
		if err != nil {
			t.Fatalf("accepted %q but Encode fails: %v", b, err)
		}
		if !bytes.Equal(again, b[:len(again)]) {
			t.Fatalf("Encode(ReadCall(%q)) = %q", b, again)
		}
	})
}
