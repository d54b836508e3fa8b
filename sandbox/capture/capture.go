package capture

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/redact"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/acl"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/hostpath"
	"golang.org/x/sys/unix"
)

// Options configure a Writer. The zero value keeps the default
// tail in memory and writes no spill file.
type Options struct {
	// TailBytes is how many bytes of the stream's tail to keep in memory;
	// ≤ 0 means sandbox.DefaultStdoutMaxBytes.
	TailBytes int
	// SpillPath is the file that receives the whole stream once it
	// outgrows TailBytes; "" means no spill file. Missing parent
	// directories are created 0700 and the file 0600, without following
	// links (hostpath.MkdirNoFollow, hostpath.CreateNoFollow): no component may be a
	// symbolic link and the file must not exist yet.
	SpillPath string
	// SpillMax caps the spill file; ≤ 0 means sandbox.DefaultSpillMaxBytes.
	SpillMax int64
	// SpillOwner, when set, is given the spill file (fchown) once it is
	// created; unset, it belongs to the running process. SpillReader,
	// when set, gets read access to it through an ACL entry
	// user:<uid>:r--, written before the file changes hands. A file
	// system without POSIX ACLs gets no entry.
	SpillOwner, SpillReader sandbox.Owner
	// Live, when set, receives every write as it happens. Its errors are
	// ignored and stop further live writes; they never fail the capture.
	Live io.Writer
	// SpillInside is copied to Stream.SpillInside when a spill path is
	// reported.
	SpillInside bool
	// Budget, when set, bounds the bytes this capture (and every other
	// capture sharing it) writes to spill files; the spill stops when it
	// runs out and no file is created once it is empty. Nil means only
	// SpillMax applies.
	Budget *SpillBudget
	// Redact, when set, replaces its secrets in the stream before
	// anything else sees it: the live writer, the tail, the spill file
	// and the byte counts all get the redacted stream, and the bytes of
	// a secret split across writes are held back until a later write
	// (or Stream) decides them. Nil redacts nothing.
	Redact *redact.Set
}

// SpillBudget is a number of spill bytes shared by the captures of one
// call. It is safe for concurrent use.
type SpillBudget struct {
	mu   sync.Mutex
	left int64
}

// NewSpillBudget returns a budget of n bytes (≤ 0: none).
func NewSpillBudget(n int64) *SpillBudget { return &SpillBudget{left: max(n, 0)} }

// take grants up to n bytes; nil grants everything.
func (b *SpillBudget) take(n int64) int64 {
	if b == nil {
		return n
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n = min(n, b.left)
	b.left -= n
	return n
}

// Left returns the bytes not yet granted; nil has no bound (-1).
func (b *SpillBudget) Left() int64 {
	if b == nil {
		return -1
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.left
}

// Writer records one output stream of a command: the exact byte count,
// a bounded tail in memory and, once the stream outgrows the tail, a
// spill file holding the stream from its first byte up to SpillMax. Its
// memory stays bounded by TailBytes whatever the stream's size.
//
// A Writer is safe for concurrent use. Write never fails the producer:
// spill errors are remembered and reported by Stream.
type Writer struct {
	opts Options

	mu       sync.Mutex
	tail     Tail
	total    int64
	spill    *os.File
	spilled  int64
	spillErr error
	liveDead bool
	done     bool
	noSpill  bool           // the budget was empty when the spill would have started
	redact   *redact.Writer // nil without Options.Redact
}

// New returns a Writer configured by o. It creates no file: the
// spill file appears only when the stream outgrows the tail.
func New(o Options) *Writer {
	if o.TailBytes <= 0 {
		o.TailBytes = sandbox.DefaultStdoutMaxBytes
	}
	if o.SpillMax <= 0 {
		o.SpillMax = sandbox.DefaultSpillMaxBytes
	}
	c := &Writer{opts: o, tail: Tail{Max: o.TailBytes}}
	if o.Redact.Len() > 0 {
		c.redact = o.Redact.Writer(recorder{c})
	}
	return c
}

// Write records p, redacted, and passes it to the live writer. It always
// returns len(p), nil. Writes after Stream are discarded.
func (c *Writer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || len(p) == 0 {
		return len(p), nil
	}
	if c.redact != nil {
		_, _ = c.redact.Write(p) // recorder never fails
		return len(p), nil
	}
	c.record(p)
	return len(p), nil
}

// recorder is the redacting writer's sink: the capture itself, called
// with c.mu held.
type recorder struct{ c *Writer }

func (r recorder) Write(p []byte) (int, error) {
	r.c.record(p)
	return len(p), nil
}

// record passes p to the live writer, the spill file and the tail.
// Called with c.mu held.
func (c *Writer) record(p []byte) {
	if c.opts.Live != nil && !c.liveDead {
		if _, err := c.opts.Live.Write(p); err != nil {
			c.liveDead = true
		}
	}
	if c.total+int64(len(p)) > int64(c.opts.TailBytes) && c.spill == nil && c.spillErr == nil && !c.noSpill && c.opts.SpillPath != "" {
		// The tail still holds every byte so far: it becomes the head of
		// the spill file.
		c.openSpill()
		c.writeSpill(c.tail.first())
		c.writeSpill(c.tail.second())
	}
	if c.spill != nil {
		c.writeSpill(p)
	}
	c.tail.Add(p)
	c.total += int64(len(p))
}

// Stream finishes the capture and returns what it recorded; call it once
// the producer is done. Text is the last TailBytes bytes; DroppedBytes is
// exactly the number of bytes before them; SpillPath is set when bytes
// were dropped and the spill file holds the stream from byte 0 (up to
// SpillMax). With Options.Redact, all of it (counts included)
// describes the redacted stream. A non-nil error wraps ErrInternal and
// reports a spill file that could not be written; the Stream is still
// valid, without SpillPath. Stream may be called more than once.
func (c *Writer) Stream() (sandbox.Stream, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.done {
		if c.redact != nil {
			_ = c.redact.Close() // the held-back end of the stream
		}
		c.done = true
		if c.spill != nil {
			if err := c.spill.Close(); err != nil && c.spillErr == nil {
				c.failSpill(err)
			}
			c.spill = nil
		}
	}
	text := c.tail.String()
	s := sandbox.Stream{
		Text:         text,
		DroppedBytes: c.total - int64(len(text)),
	}
	s.Truncated = s.DroppedBytes > 0
	if s.Truncated && c.spillErr == nil && !c.noSpill && c.opts.SpillPath != "" {
		s.SpillPath = c.opts.SpillPath
		s.SpillInside = c.opts.SpillInside
	}
	if c.spillErr != nil {
		return s, sandbox.Errorf(sandbox.ErrInternal, "sandbox: spill file %q: %w", c.opts.SpillPath, c.spillErr)
	}
	return s, nil
}

// openSpill creates the spill file without following links, unless the
// budget is empty. Called with c.mu held.
func (c *Writer) openSpill() {
	if c.opts.Budget.Left() == 0 {
		c.noSpill = true
		return
	}
	dir, err := hostpath.MkdirNoFollow("spill directory", filepath.Dir(c.opts.SpillPath), 0o700)
	if err != nil {
		c.spillErr = err
		return
	}
	defer dir.Close()
	f, err := hostpath.CreateNoFollow(dir, filepath.Base(c.opts.SpillPath), 0o600)
	if err != nil {
		c.spillErr = err
		return
	}
	c.spill = f
	if err := c.handOver(f); err != nil {
		c.failSpill(err)
	}
}

// handOver lets SpillReader read the new spill file f and gives it to
// SpillOwner.
func (c *Writer) handOver(f *os.File) error {
	owner := hostpath.EffectiveOwner(c.opts.SpillOwner)
	if r := c.opts.SpillReader; r.Set && r.UID != owner.UID {
		if err := acl.Grant(f, owner.UID, r.UID, acl.Read); err != nil && !errors.Is(err, syscall.EOPNOTSUPP) {
			return fmt.Errorf("grant read access to uid %d: %w", r.UID, err)
		}
	}
	if owner.UID != uint32(os.Geteuid()) {
		if err := syscall.Fchown(int(f.Fd()), int(owner.UID), int(owner.GID)); err != nil {
			return fmt.Errorf("give it to the harness user %d:%d: %w", owner.UID, owner.GID, err)
		}
	}
	return nil
}

// writeSpill appends p to the spill file up to SpillMax. Called with
// c.mu held.
func (c *Writer) writeSpill(p []byte) {
	if c.spill == nil {
		return
	}
	room := c.opts.SpillMax - c.spilled
	if room <= 0 || len(p) == 0 {
		return
	}
	room = c.opts.Budget.take(min(room, int64(len(p))))
	if room <= 0 {
		return
	}
	p = p[:room]
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
func (c *Writer) failSpill(err error) {
	c.spillErr = err
	if c.spill != nil {
		_ = c.spill.Close()
		c.spill = nil
	}
	if rmErr := os.Remove(c.opts.SpillPath); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) {
		c.spillErr = errors.Join(err, rmErr)
	}
}

// Tail keeps the last Max bytes added to it. It grows up to Max and
// then becomes a ring. The zero value with Max > 0 is ready; it is not
// safe for concurrent use.
type Tail struct {
	// Max is how many bytes are kept; ≤ 0 keeps none.
	Max  int
	buf  []byte
	next int // ring mode (len(buf) == max): index of the oldest byte
}

// Add keeps the newest bytes of p.
func (t *Tail) Add(p []byte) {
	if t.Max <= 0 {
		return
	}
	if len(p) >= t.Max {
		if cap(t.buf) < t.Max {
			t.buf = make([]byte, t.Max)
		}
		t.buf = t.buf[:t.Max]
		copy(t.buf, p[len(p)-t.Max:])
		t.next = 0
		return
	}
	if len(t.buf) < t.Max {
		n := min(t.Max-len(t.buf), len(p))
		if cap(t.buf) < len(t.buf)+n {
			// Grow geometrically but never past max.
			nb := make([]byte, len(t.buf), min(t.Max, max(2*cap(t.buf), len(t.buf)+n, 512)))
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
		t.next = (t.next + n) % t.Max
	}
}

// first and second are the kept bytes in order: first() then second().
func (t *Tail) first() []byte {
	if len(t.buf) < t.Max {
		return t.buf
	}
	return t.buf[t.next:]
}

func (t *Tail) second() []byte {
	if len(t.buf) < t.Max {
		return nil
	}
	return t.buf[:t.next]
}

// String returns the kept bytes in order, with one allocation.
func (t *Tail) String() string {
	var b strings.Builder
	b.Grow(len(t.buf))
	b.Write(t.first())
	b.Write(t.second())
	return b.String()
}

// Reset forgets the kept bytes but keeps the buffer.
func (t *Tail) Reset() {
	t.buf = t.buf[:0]
	t.next = 0
}

// ForCall returns the call's stdout and stderr captures, streaming live
// to stdout and stderr (either may be nil). Spill files go to
// c.SpillDir, or, for a call without a session directory, to
// stateDir/spill (links in stateDir, which the operator chose, are
// resolved first): <dir>/<ID>.stdout and <dir>/<ID>.stderr. Spill files
// in c.SpillDir belong to c.SpillOwner and c.SpillReader may read them
// (Options). Both captures redact c.Redact's secrets
// (Options.Redact), so the live writers, the tails and the spill
// files never see them.
//
// Call it right before the runtime starts: it bounds the spill
// directory first (PruneSpill with c.SpillTotal and c.SpillRetention,
// removing the oldest files until min(c.SpillTotal/2, c.SpillMax) bytes
// are free for this call) and the two captures share what is left of
// c.SpillTotal, so the directory never holds more than c.SpillTotal
// after a call (calls of one session running at the same time may each
// use what was free when they started). A spill directory that cannot be pruned (a link where
// it should be, an I/O error) gets an empty budget: the call runs, its
// output is only truncated, never spilled.
func ForCall(c *sandbox.Call, stateDir string, stdout, stderr io.Writer) (*Writer, *Writer) {
	dir := c.SpillDir
	if dir == "" {
		dir = filepath.Join(hostpath.Real(stateDir), "spill")
	}
	left, err := PruneSpill(dir, c.SpillTotal, min(c.SpillTotal/2, c.SpillMax), c.SpillRetention, time.Now())
	if err != nil {
		left = 0
	}
	budget := NewSpillBudget(left)
	var owner, reader sandbox.Owner
	if dir == c.SpillDir {
		owner, reader = c.SpillOwner, c.SpillReader
	}
	capture := func(suffix string, live io.Writer) *Writer {
		return New(Options{
			TailBytes:   c.TailBytes,
			SpillPath:   filepath.Join(dir, c.ID+suffix),
			SpillMax:    c.SpillMax,
			Live:        live,
			SpillInside: c.SpillInside,
			Budget:      budget,
			SpillOwner:  owner,
			SpillReader: reader,
			Redact:      c.Redact,
		})
	}
	return capture(".stdout", stdout), capture(".stderr", stderr)
}

// PruneSpill bounds the spill directory dir, opened without following
// links (created 0700 when missing): it removes the regular files older
// than retention (by modification time, against now), then the oldest
// files until the total size is at most total-reserve, and returns how
// many bytes may still be written before the total reaches total. Other
// entries (directories, links) are neither counted nor touched; a file
// removed while a concurrent call still writes it keeps its space until
// that call ends. total ≤ 0 means sandbox.DefaultSpillTotalBytes, retention ≤ 0
// sandbox.DefaultSpillRetention. Errors wrap ErrInvalid (a link in dir's path)
// or ErrInternal.
func PruneSpill(dir string, total, reserve int64, retention time.Duration, now time.Time) (int64, error) {
	if total <= 0 {
		total = sandbox.DefaultSpillTotalBytes
	}
	if retention <= 0 {
		retention = sandbox.DefaultSpillRetention
	}
	reserve = min(max(reserve, 0), total)
	d, err := hostpath.MkdirNoFollow("spill directory", dir, 0o700)
	if err != nil {
		return 0, err
	}
	defer d.Close()
	dfd := int(d.Fd())
	lfd, err := syscall.Openat(dfd, ".", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, sandbox.Errorf(sandbox.ErrInternal, "sandbox: spill directory %q: %w", dir, err)
	}
	lf := os.NewFile(uintptr(lfd), dir)
	names, err := lf.Readdirnames(-1)
	_ = lf.Close()
	if err != nil {
		return 0, sandbox.Errorf(sandbox.ErrInternal, "sandbox: spill directory %q: %w", dir, err)
	}
	type file struct {
		name  string
		size  int64
		mtime time.Time
	}
	var files []file
	var sum int64
	var errs []error
	remove := func(name string) bool {
		if err := syscall.Unlinkat(dfd, name); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("remove %s: %w", name, err))
			return false
		}
		return true
	}
	for _, name := range names {
		var st syscall.Stat_t
		if !statNoFollow(dfd, name, &st) || st.Mode&syscall.S_IFMT != syscall.S_IFREG {
			continue
		}
		f := file{name: name, size: st.Size, mtime: time.Unix(st.Mtim.Unix())}
		if now.Sub(f.mtime) > retention && remove(name) {
			continue
		}
		files = append(files, f)
		sum += f.size
	}
	slices.SortFunc(files, func(a, b file) int {
		return cmp.Or(a.mtime.Compare(b.mtime), strings.Compare(a.name, b.name))
	})
	for _, f := range files {
		if sum <= total-reserve {
			break
		}
		if remove(f.name) {
			sum -= f.size
		}
	}
	if len(errs) > 0 {
		return max(total-sum, 0), sandbox.Errorf(sandbox.ErrInternal, "sandbox: spill directory %q: %w", dir, errors.Join(errs...))
	}
	return max(total-sum, 0), nil
}

// statNoFollow stats the entry name of the directory dirfd without
// following a link; false when it cannot.
func statNoFollow(dirfd int, name string, st *syscall.Stat_t) bool {
	fd, err := syscall.Openat(dirfd, name, unix.O_PATH|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer syscall.Close(fd)
	return syscall.Fstat(fd, st) == nil
}
