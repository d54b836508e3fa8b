// Package stub is the protocol between an executor and the stub, the
// tiny program (cmd/dsh-sandbox-stub) that is pid 1 of every prepared
// container: the executor holds one end of a control channel, the stub
// the other (inherited as descriptor 3). The stub reports that it is
// ready; the executor writes exactly one call message (Command: argv,
// environment, working directory, deadline); the stub starts the command
// with the container's stdio and writes reports back (Report: started,
// exited, failed, deadline). When the
// control channel reaches end of file (the executor died) or the
// deadline passes, the stub exits and the kernel kills everything else
// in the container's pid namespace: the stub is the call's lifeline.
//
// A call message is a frame: the 4 bytes "DSHC", a big-endian uint32
// body length (at most MaxCall), then the body: a version byte (1), a
// flags byte (bit 0: terminal; bit 1: the command's stdin, stdout and
// stderr come attached to the header as SCM_RIGHTS, so that only the
// command holds the call's pipes), a big-endian uint64 deadline in
// nanoseconds (relative to the moment the stub reads the message), the
// working directory, the argument count and arguments, the environment
// count and entries; every string is a big-endian uint32 length and
// that many bytes, none holding a NUL byte. A report is 8 bytes: a kind
// byte, three zero bytes and a big-endian int32 value.
//
// The package uses only the standard library: the stub imports it.
package stub

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ControlFD is the stub's descriptor of the control channel: the first
// descriptor after stdio, which the runtime passes on (--preserve-fds 1).
const ControlFD = 3

// MaxCall bounds the body of a call message: argv and environment
// together (Linux allows execve about 2 MiB of them by default).
const MaxCall = 8 << 20

// callMagic starts every call message.
const callMagic = "DSHC"

// version is the protocol version a call message carries.
const version = 1

// Flags of a call message.
const (
	// flagTerminal marks a call that runs on the container's terminal.
	flagTerminal = 1
	// flagStdio marks a call whose stdin, stdout and stderr came with
	// the message.
	flagStdio = 2
)

// HeaderSize is the size of a call message's header; with Command.Stdio,
// the three descriptors of the command's stdin, stdout and stderr come
// attached (SCM_RIGHTS) to these bytes.
const HeaderSize = 8

// ErrMalformed is the class of every error ReadCall returns for a
// message that breaks the protocol.
var ErrMalformed = errors.New("malformed call message")

// Command is what a stub runs, the content of a call message: one
// command.
type Command struct {
	// Argv is the command line; Argv[0] without a slash is looked up in
	// the PATH of Env, as a shell's exec does. Required.
	Argv []string
	// Env is the command's complete environment (KEY=VALUE).
	Env []string
	// Dir is the absolute working directory of the command. Required.
	Dir string
	// Deadline is how long after reading the message the stub exits,
	// killing whatever runs in the container; > 0.
	Deadline time.Duration
	// Terminal says the container's stdio is a terminal: the command
	// gets it as its controlling terminal in a new session.
	Terminal bool
	// Stdio says the command's stdin, stdout and stderr came attached
	// to the message's header (HeaderSize), not the stub's own stdio:
	// the runtime's stdio is then not the call's, and only the command
	// holds the call's pipes.
	Stdio bool
}

// check validates c as a call message must be.
func (c *Command) check() error {
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return fmt.Errorf("%w: argv is empty", ErrMalformed)
	}
	if !strings.HasPrefix(c.Dir, "/") {
		return fmt.Errorf("%w: dir %q is not absolute", ErrMalformed, c.Dir)
	}
	if c.Deadline <= 0 {
		return fmt.Errorf("%w: deadline %v is not positive", ErrMalformed, c.Deadline)
	}
	for _, s := range c.Argv {
		if strings.IndexByte(s, 0) >= 0 {
			return fmt.Errorf("%w: an argument holds a NUL byte", ErrMalformed)
		}
	}
	for _, s := range c.Env {
		if strings.IndexByte(s, 0) >= 0 || !strings.Contains(s, "=") {
			return fmt.Errorf("%w: an environment entry is not KEY=VALUE without NUL bytes", ErrMalformed)
		}
	}
	if strings.IndexByte(c.Dir, 0) >= 0 {
		return fmt.Errorf("%w: dir holds a NUL byte", ErrMalformed)
	}
	return nil
}

// Encode returns c as one call message.
func (c *Command) Encode() ([]byte, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	n := 1 + 1 + 8 + 4 + len(c.Dir) + 4 + 4
	for _, s := range c.Argv {
		n += 4 + len(s)
	}
	for _, s := range c.Env {
		n += 4 + len(s)
	}
	if n > MaxCall {
		return nil, fmt.Errorf("%w: %d bytes of argv and environment, at most %d", ErrMalformed, n, MaxCall)
	}
	b := make([]byte, 0, 8+n)
	b = append(b, callMagic...)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	var flags byte
	if c.Terminal {
		flags |= flagTerminal
	}
	if c.Stdio {
		flags |= flagStdio
	}
	b = append(b, version, flags)
	b = binary.BigEndian.AppendUint64(b, uint64(c.Deadline))
	b = appendString(b, c.Dir)
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.Argv)))
	for _, s := range c.Argv {
		b = appendString(b, s)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(c.Env)))
	for _, s := range c.Env {
		b = appendString(b, s)
	}
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// ReadCall reads exactly one call message from r. An r that ends before
// the first byte is io.EOF; any other broken message is an error
// wrapping ErrMalformed (or the read error).
func ReadCall(r io.Reader) (*Command, error) {
	var head [HeaderSize]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: truncated header", ErrMalformed)
		}
		return nil, err
	}
	if string(head[:4]) != callMagic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrMalformed, head[:4])
	}
	n := binary.BigEndian.Uint32(head[4:])
	if n > MaxCall {
		return nil, fmt.Errorf("%w: body of %d bytes, at most %d", ErrMalformed, n, MaxCall)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, fmt.Errorf("%w: truncated body: %v", ErrMalformed, err)
	}
	return DecodeCall(body)
}

// DecodeCall decodes the body of a call message (the bytes after the
// header).
func DecodeCall(body []byte) (*Command, error) {
	d := decoder{b: body}
	v, flags := d.byte(), d.byte()
	if d.err == nil && v != version {
		return nil, fmt.Errorf("%w: version %d, want %d", ErrMalformed, v, version)
	}
	if flags&^(flagTerminal|flagStdio) != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", ErrMalformed, flags)
	}
	c := &Command{Terminal: flags&flagTerminal != 0, Stdio: flags&flagStdio != 0}
	dl := d.uint64()
	if dl > uint64(1<<63-1) {
		return nil, fmt.Errorf("%w: deadline out of range", ErrMalformed)
	}
	c.Deadline = time.Duration(dl)
	c.Dir = d.string()
	c.Argv = d.strings()
	c.Env = d.strings()
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the environment", ErrMalformed, len(d.b))
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return c, nil
}

// decoder reads a body front to back; the first error sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.err = fmt.Errorf("%w: truncated body", ErrMalformed)
		return nil
	}
	p := d.b[:n]
	d.b = d.b[n:]
	return p
}

func (d *decoder) byte() byte {
	if p := d.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (d *decoder) uint32() uint32 {
	if p := d.take(4); p != nil {
		return binary.BigEndian.Uint32(p)
	}
	return 0
}

func (d *decoder) uint64() uint64 {
	if p := d.take(8); p != nil {
		return binary.BigEndian.Uint64(p)
	}
	return 0
}

func (d *decoder) string() string {
	n := d.uint32()
	if uint64(n) > uint64(len(d.b)) {
		d.take(len(d.b) + 1)
		return ""
	}
	return string(d.take(int(n)))
}

// strings reads a count and that many strings; every string takes at
// least 4 bytes, so a count larger than the rest allows is refused
// before anything is allocated for it.
func (d *decoder) strings() []string {
	n := d.uint32()
	if d.err != nil {
		return nil
	}
	if uint64(n)*4 > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: count %d exceeds the body", ErrMalformed, n)
		return nil
	}
	out := make([]string, 0, n)
	for i := uint32(0); i < n && d.err == nil; i++ {
		out = append(out, d.string())
	}
	return out
}

// Kind is what a report says.
type Kind byte

// The kinds of report a stub writes.
const (
	// Ready: the stub runs and waits for its call (the container is
	// prepared); Value is 0.
	Ready Kind = 'R'
	// Started: the command was executed; Value is its pid in the
	// container.
	Started Kind = 'S'
	// Exited: the command ended; Value is its raw wait status.
	Exited Kind = 'X'
	// Failed: the command could not be started; Value is the exit status
	// the stub ends with (127 not found, 126 not executable or no working
	// directory), and the reason went to the command's stderr.
	Failed Kind = 'F'
	// Expired: the deadline passed; the stub exits and the kernel kills
	// the container's processes.
	Expired Kind = 'D'
)

// ReportSize is the size of a report on the wire.
const ReportSize = 8

// Report is one message from the stub.
type Report struct {
	Kind  Kind
	Value int32
}

// Encode returns r on the wire.
func (r Report) Encode() []byte {
	b := []byte{byte(r.Kind), 0, 0, 0}
	return binary.BigEndian.AppendUint32(b, uint32(r.Value))
}

// ReadReport reads one report from r; io.EOF when r ends cleanly first.
func ReadReport(r io.Reader) (Report, error) {
	var b [ReportSize]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return Report{}, err
	}
	k := Kind(b[0])
	switch k {
	case Ready, Started, Exited, Failed, Expired:
	default:
		return Report{}, fmt.Errorf("stub report: unknown kind %q", b[0])
	}
	if b[1]|b[2]|b[3] != 0 {
		return Report{}, fmt.Errorf("stub report: nonzero padding")
	}
	return Report{Kind: k, Value: int32(binary.BigEndian.Uint32(b[4:]))}, nil
}

// Name is the file name of the stub program.
const Name = "dsh-sandbox-stub"

// Locate returns the absolute path of the stub program: path when it is
// given, else Name in the directory of the running executable (where
// `go install ./cmd/...` and the release archive put it), else Name on
// PATH. The file must be a regular executable file.
func Locate(path string) (string, error) {
	if path == "" {
		if exe, err := os.Executable(); err == nil {
			if p := filepath.Join(filepath.Dir(exe), Name); isProgram(p) {
				path = p
			}
		}
	}
	if path == "" {
		p, err := exec.LookPath(Name)
		if err != nil {
			return "", fmt.Errorf("%s not found next to the executable or on PATH: install it with `CGO_ENABLED=0 go install ./cmd/dsh-sandbox-stub` (docs/pool.md)", Name)
		}
		path = p
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%s at %q: %v", Name, path, err)
	}
	if !isProgram(abs) {
		return "", fmt.Errorf("%s at %q: not an executable regular file", Name, abs)
	}
	return abs, nil
}

func isProgram(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}
