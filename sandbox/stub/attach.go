package stub

import (
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
)

// AttachArg is the argument that starts the stub in attach mode.
const AttachArg = "--attach"

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
