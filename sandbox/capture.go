package sandbox

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// CaptureOptions configure a Capture. The zero value keeps the default
// tail in memory and writes no spill file.
type CaptureOptions struct {
	// TailBytes is how many bytes of the stream's tail to keep in memory;
	// ≤ 0 means DefaultStdoutMaxBytes.
	TailBytes int
	// SpillPath is the file that receives the whole stream once it
	// outgrows TailBytes; "" means no spill file. Missing parent
	// directories are created 0700; the file is created 0600 and must not
	// exist yet.
	SpillPath string
	// SpillMax caps the spill file; ≤ 0 means DefaultSpillMaxBytes.
	SpillMax int64
	// Live, when set, receives every write as it happens. Its errors are
	// ignored and stop further live writes; they never fail the capture.
	Live io.Writer
	// SpillInside is copied to Stream.SpillInside when a spill path is
	// reported.
	SpillInside bool
}

// Capture records one output stream of a command: the exact byte count,
// a bounded tail in memory and, once the stream outgrows the tail, a
// spill file holding the stream from its first byte up to SpillMax. Its
// memory stays bounded by TailBytes whatever the stream's size.
//
// A Capture is safe for concurrent use. Write never fails the producer:
// spill errors are remembered and reported by Stream.
type Capture struct {
	opts CaptureOptions

	mu       sync.Mutex
	tail     tailBuffer
	total    int64
	spill    *os.File
	spilled  int64
	spillErr error
	liveDead bool
	done     bool
}

// NewCapture returns a Capture configured by o. It creates no file: the
// spill file appears only when the stream outgrows the tail.
func NewCapture(o CaptureOptions) *Capture {
	if o.TailBytes <= 0 {
		o.TailBytes = DefaultStdoutMaxBytes
	}
	if o.SpillMax <= 0 {
		o.SpillMax = DefaultSpillMaxBytes
	}
	return &Capture{opts: o, tail: tailBuffer{max: o.TailBytes}}
}

// Write records p and passes it to the live writer. It always returns
// len(p), nil. Writes after Stream are discarded.
func (c *Capture) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || len(p) == 0 {
		return len(p), nil
	}
	if c.opts.Live != nil && !c.liveDead {
		if _, err := c.opts.Live.Write(p); err != nil {
			c.liveDead = true
		}
	}
	if c.total+int64(len(p)) > int64(c.opts.TailBytes) && c.spill == nil && c.spillErr == nil && c.opts.SpillPath != "" {
		// The tail still holds every byte so far: it becomes the head of
		// the spill file.
		c.openSpill()
		c.writeSpill(c.tail.first())
		c.writeSpill(c.tail.second())
	}
	if c.spill != nil {
		c.writeSpill(p)
	}
	c.tail.write(p)
	c.total += int64(len(p))
	return len(p), nil
}

// Stream finishes the capture and returns what it recorded; call it once
// the producer is done. Text is the last TailBytes bytes; DroppedBytes is
// exactly the number of bytes before them; SpillPath is set when bytes
// were dropped and the spill file holds the stream from byte 0 (up to
// SpillMax). A non-nil error wraps ErrInternal and reports a spill file
// that could not be written; the Stream is still valid, without
// SpillPath. Stream may be called more than once.
func (c *Capture) Stream() (Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		c.done = true
		if c.spill != nil {
			if err := c.spill.Close(); err != nil && c.spillErr == nil {
				c.failSpill(err)
			}
			c.spill = nil
		}
	}
	text := c.tail.String()
	s := Stream{
		Text:         text,
		DroppedBytes: c.total - int64(len(text)),
	}
	s.Truncated = s.DroppedBytes > 0
	if s.Truncated && c.spillErr == nil && c.opts.SpillPath != "" {
		s.SpillPath = c.opts.SpillPath
		s.SpillInside = c.opts.SpillInside
	}
	if c.spillErr != nil {
		return s, Errorf(ErrInternal, "sandbox: spill file %q: %w", c.opts.SpillPath, c.spillErr)
	}
	return s, nil
}

// openSpill creates the spill file. Called with c.mu held.
func (c *Capture) openSpill() {
	if err := os.MkdirAll(filepath.Dir(c.opts.SpillPath), 0o700); err != nil {
		c.spillErr = err
		return
	}
	f, err := os.OpenFile(c.opts.SpillPath, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		c.spillErr = err
		return
	}
	c.spill = f
}

// writeSpill appends p to the spill file up to SpillMax. Called with
// c.mu held.
func (c *Capture) writeSpill(p []byte) {
	if c.spill == nil {
		return
	}
	room := c.opts.SpillMax - c.spilled
	if room <= 0 || len(p) == 0 {
		return
	}
	if int64(len(p)) > room {
		p = p[:room]
	}
	n, err := c.spill.Write(p)
	c.spilled += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		c.failSpill(err)
	}
}

// failSpill records err and removes the incomplete spill file, which
// would otherwise claim to hold the whole output. Called with c.mu held.
func (c *Capture) failSpill(err error) {
	c.spillErr = err
	if c.spill != nil {
		_ = c.spill.Close()
		c.spill = nil
	}
	if rmErr := os.Remove(c.opts.SpillPath); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		c.spillErr = errors.Join(err, rmErr)
	}
}

// tailBuffer keeps the last max bytes written to it. It grows up to max
// and then becomes a ring. The zero value with max > 0 is ready.
type tailBuffer struct {
	max  int
	buf  []byte
	next int // ring mode (len(buf) == max): index of the oldest byte
}

func (t *tailBuffer) write(p []byte) {
	if t.max <= 0 {
		return
	}
	if len(p) >= t.max {
		if cap(t.buf) < t.max {
			t.buf = make([]byte, t.max)
		}
		t.buf = t.buf[:t.max]
		copy(t.buf, p[len(p)-t.max:])
		t.next = 0
		return
	}
	if len(t.buf) < t.max {
		n := min(t.max-len(t.buf), len(p))
		if cap(t.buf) < len(t.buf)+n {
			// Grow geometrically but never past max.
			nb := make([]byte, len(t.buf), min(t.max, max(2*cap(t.buf), len(t.buf)+n, 512)))
			copy(nb, t.buf)
			t.buf = nb
		}
		t.buf = append(t.buf, p[:n]...)
		p = p[n:]
		t.next = 0
	}
	for len(p) > 0 {
		n := copy(t.buf[t.next:], p)
		p = p[n:]
		t.next = (t.next + n) % t.max
	}
}

// first and second are the kept bytes in order: first() then second().
func (t *tailBuffer) first() []byte {
	if len(t.buf) < t.max {
		return t.buf
	}
	return t.buf[t.next:]
}

func (t *tailBuffer) second() []byte {
	if len(t.buf) < t.max {
		return nil
	}
	return t.buf[:t.next]
}

// String returns the kept bytes in order, with one allocation.
func (t *tailBuffer) String() string {
	var b strings.Builder
	b.Grow(len(t.buf))
	b.Write(t.first())
	b.Write(t.second())
	return b.String()
}

// reset forgets the kept bytes but keeps the buffer.
func (t *tailBuffer) reset() {
	t.buf = t.buf[:0]
	t.next = 0
}

// Captures returns the call's stdout and stderr captures, streaming live
// to stdout and stderr (either may be nil). Spill files go to
// c.SpillDir, or, for a call without a session directory, to
// stateDir/spill: <dir>/<ID>.stdout and <dir>/<ID>.stderr.
func (c *Call) Captures(stateDir string, stdout, stderr io.Writer) (*Capture, *Capture) {
	dir := c.SpillDir
	if dir == "" {
		dir = filepath.Join(stateDir, "spill")
	}
	capture := func(suffix string, live io.Writer) *Capture {
		return NewCapture(CaptureOptions{
			TailBytes:   c.TailBytes,
			SpillPath:   filepath.Join(dir, c.ID+suffix),
			SpillMax:    c.SpillMax,
			Live:        live,
			SpillInside: c.SpillInside,
		})
	}
	return capture(".stdout", stdout), capture(".stderr", stderr)
}
