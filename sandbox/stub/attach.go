package stub

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
)

// Attach mode (cmd/dsh-sandbox-stub --attach) is the protocol for a
// container whose only channel to the executor is its own stdio, as a
// Kubernetes pod's attach stream is (sandbox/kubernetes): there is no
// descriptor 3, so the call, the command's stdio, signals and reports
// share stdin and stdout as frames.
//
// The executor writes, on the stub's stdin, one call message (Call,
// exactly as on the control channel) and then frames: FrameStdin (bytes
// for the command's stdin), FrameStdinEnd (the command's stdin ends) and
// FrameSignal (a signal for every process of the container). Its stdin
// stays open for the whole call: end of file there means the executor
// is gone, and the stub kills everything and exits (the lifeline). The
// stub writes, on its stdout, FrameStdout and FrameStderr (the command's
// output, in the order it was read), FrameOOM (the out-of-memory killer
// struck in the container's memory cgroup) and FrameReport (a Report);
// the last frame is a report of kind Exited, Failed or Expired. The
// stub's own stderr carries only its diagnostics.
//
// Before the call message the executor sends FramePing frames (empty),
// and the stub answers each with a FramePong, until the first pong
// arrives; only then does the executor send the call. The container
// runtime starts copying an attach stream's stdin before it connects
// its stdout, so what the stub writes at once can be lost: a call of
// `true` lost its whole output and report. A pong that arrives proves
// the stub's stdout reaches the executor.
//
// A frame is 8 bytes of header — a kind byte, three zero bytes, a
// big-endian uint32 payload length (at most MaxFrame) — and the payload.
const (
	FrameStdin    byte = 'i'
	FrameStdinEnd byte = 'c'
	FrameSignal   byte = 's'
	FrameStdout   byte = 'o'
	FrameStderr   byte = 'e'
	FrameOOM      byte = 'm'
	FrameReport   byte = 'r'
	FramePing     byte = 'p'
	FramePong     byte = 'P'
)

// AttachArg is the argument that starts the stub in attach mode.
const AttachArg = "--attach"

// RawArg, right after AttachArg, makes the stub write its stdout
// unescaped (see NewEscaper): for a runtime that does not log the
// container's stdout line by line (the Docker engine without a log
// driver, containerd), where the escaping only costs time.
const RawArg = "--raw"

// LifelineArg, after AttachArg (and RawArg), names a FIFO the stub reads besides its
// stdin: when that reaches end of file (every writer, the executor, is
// gone) the stub kills everything and exits. It is for a runtime that
// holds the container's stdin open itself, as containerd's shim does,
// so that the end of the executor never ends the stdin.
const LifelineArg = "--lifeline"

// MaxFrame bounds a frame's payload.
const MaxFrame = 1 << 20

// frameHeader is the size of a frame's header.
const frameHeader = 8

// Frame is one frame of attach mode.
type Frame struct {
	Kind byte
	Data []byte
}

// AppendFrame appends the frame kind, data to b; data longer than
// MaxFrame is a programming error (split it first).
func AppendFrame(b []byte, kind byte, data []byte) []byte {
	if len(data) > MaxFrame {
		panic("stub: frame payload exceeds MaxFrame")
	}
	b = append(b, kind, 0, 0, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(data)))
	return append(b, data...)
}

// WriteFrames writes data to w as frames of kind, each at most MaxFrame
// long, in one Write per frame; empty data writes one empty frame.
func WriteFrames(w io.Writer, kind byte, data []byte) error {
	for {
		n := min(len(data), MaxFrame)
		if _, err := w.Write(AppendFrame(make([]byte, 0, frameHeader+n), kind, data[:n])); err != nil {
			return err
		}
		data = data[n:]
		if len(data) == 0 {
			return nil
		}
	}
}

// SignalFrame is the payload of a FrameSignal for signal number sig.
func SignalFrame(sig int) []byte { return binary.BigEndian.AppendUint32(nil, uint32(sig)) }

// FrameSignalNumber reads the payload of a FrameSignal.
func FrameSignalNumber(f Frame) (int, error) {
	if len(f.Data) != 4 {
		return 0, fmt.Errorf("%w: signal frame of %d bytes, want 4", ErrMalformed, len(f.Data))
	}
	n := binary.BigEndian.Uint32(f.Data)
	if n == 0 || n > 64 {
		return 0, fmt.Errorf("%w: signal %d out of range", ErrMalformed, n)
	}
	return int(n), nil
}

// FrameReportValue reads the payload of a FrameReport.
func FrameReportValue(f Frame) (Report, error) {
	if len(f.Data) != ReportSize {
		return Report{}, fmt.Errorf("%w: report frame of %d bytes, want %d", ErrMalformed, len(f.Data), ReportSize)
	}
	return ReadReport(bytes.NewReader(f.Data))
}

// ReadFrame reads one frame from r. An r that ends before the first
// byte is io.EOF; a frame cut short, with nonzero padding or too long a
// payload is an error wrapping ErrMalformed (or the read error). The
// kind is not checked: each side accepts its own.
func ReadFrame(r io.Reader) (Frame, error) {
	var h [frameHeader]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		if err == io.ErrUnexpectedEOF {
			return Frame{}, fmt.Errorf("%w: truncated frame header", ErrMalformed)
		}
		return Frame{}, err
	}
	if h[1]|h[2]|h[3] != 0 {
		return Frame{}, fmt.Errorf("%w: nonzero frame padding", ErrMalformed)
	}
	n := binary.BigEndian.Uint32(h[4:])
	if n > MaxFrame {
		return Frame{}, fmt.Errorf("%w: frame of %d bytes, at most %d", ErrMalformed, n, MaxFrame)
	}
	f := Frame{Kind: h[0], Data: make([]byte, n)}
	if _, err := io.ReadFull(r, f.Data); err != nil {
		return Frame{}, fmt.Errorf("%w: truncated frame: %v", ErrMalformed, err)
	}
	return f, nil
}

// The stub's stdout in attach mode holds no newline byte: the container
// runtime logs a container's stdout line by line (the CRI log format),
// and a command printing many short lines made that logger the call's
// bottleneck (about 3 MB/s on the test cluster, against 20 MB/s for the
// same bytes without newlines). NewEscaper replaces every '\n' with
// escapeByte 'n' and every escapeByte with escapeByte 'e'; NewUnescaper
// reverses it. The executor's frames to the stub (its stdin) are not
// escaped.
const escapeByte = 0xfe

// NewEscaper returns a writer that writes to w what it is given, escaped.
// It is not safe for concurrent use.
func NewEscaper(w io.Writer) io.Writer { return &escaper{w: w} }

type escaper struct {
	w   io.Writer
	buf []byte
}

func (e *escaper) Write(p []byte) (int, error) {
	b := e.buf[:0]
	for rest := p; len(rest) > 0; {
		// Copy the run up to the next byte to escape.
		n := 0
		for n < len(rest) && rest[n] != '\n' && rest[n] != escapeByte {
			n++
		}
		b = append(b, rest[:n]...)
		if n == len(rest) {
			break
		}
		if rest[n] == '\n' {
			b = append(b, escapeByte, 'n')
		} else {
			b = append(b, escapeByte, 'e')
		}
		rest = rest[n+1:]
	}
	e.buf = b
	if _, err := e.w.Write(b); err != nil {
		return 0, err
	}
	return len(p), nil
}

// NewUnescaper returns a reader of what r holds, unescaped; an escape
// byte followed by anything but 'n' or 'e' is an ErrMalformed error.
func NewUnescaper(r io.Reader) io.Reader { return &unescaper{r: bufio.NewReaderSize(r, 64<<10)} }

type unescaper struct{ r *bufio.Reader }

func (u *unescaper) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		if n > 0 && u.r.Buffered() == 0 {
			break
		}
		// A run without escapes, copied at once.
		chunk, err := u.r.Peek(max(1, min(len(p)-n, u.r.Buffered())))
		if len(chunk) == 0 {
			if n > 0 {
				return n, nil
			}
			return 0, err
		}
		if k := bytes.IndexByte(chunk, escapeByte); k != 0 {
			if k < 0 {
				k = len(chunk)
			}
			copy(p[n:], chunk[:k])
			_, _ = u.r.Discard(k)
			n += k
			continue
		}
		_, _ = u.r.Discard(1)
		d, err := u.r.ReadByte()
		switch {
		case err != nil:
			return n, fmt.Errorf("%w: the stream ends inside an escape", ErrMalformed)
		case d == 'n':
			p[n] = '\n'
		case d == 'e':
			p[n] = escapeByte
		default:
			return n, fmt.Errorf("%w: escape byte followed by %#x", ErrMalformed, d)
		}
		n++
	}
	return n, nil
}
