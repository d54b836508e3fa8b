package jsonl

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// sessionLog is the write side of one session's transcript: the queue of
// appended events and what is known of the file.
type sessionLog struct {
	store *Store
	id    string

	mu sync.Mutex // guards the fields below
	// header, headerLine (the marshalled header and its newline) and path
	// are bound by the first successful append and immutable afterwards.
	header     session.Header
	headerLine []byte
	path       string
	probed     bool // the file was looked at (nextSeq, onDisk, size set)
	closed     bool
	nextSeq    int64 // seq the next appended event must carry
	// pending holds the queued events, one slice per Append call (so
	// queuing never copies events), in seq order.
	pending [][]persistence.Event
	timer   *time.Timer // armed while pending is non-empty

	// writeMu serializes writes to the file and guards onDisk and size
	// once events are pending (probe sets them before that, under mu).
	writeMu sync.Mutex
	onDisk  bool
	size    int64 // length of the valid prefix of the file
}

// append checks and copies events, then queues them for h's log.
func (sl *sessionLog) append(h session.Header, events []persistence.Event) error {
	owned := make([]persistence.Event, len(events))
	for i := range events {
		e, err := ownEvent(events[i])
		if err != nil {
			return fmt.Errorf("jsonl: session %q: event %d (seq %d): %w", sl.id, i, events[i].Seq, err)
		}
		owned[i] = e
	}
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if sl.closed {
		return ErrClosed
	}
	if !sl.probed {
		if err := sl.bind(h); err != nil {
			return err
		}
		if err := sl.probe(); err != nil {
			return err
		}
		sl.probed = true
	} else if !sameHeader(h, sl.header) {
		line, _ := h.MarshalJSON()
		return fmt.Errorf("jsonl: session %q: header %s differs from the header it was first appended with, %s",
			sl.id, line, bytes.TrimSuffix(sl.headerLine, []byte("\n")))
	}
	for i := range owned {
		if want := sl.nextSeq + int64(i); owned[i].Seq != want {
			return fmt.Errorf("jsonl: session %q: event %d has seq %d, want %d: %w", sl.id, i, owned[i].Seq, want, persistence.ErrSeqGap)
		}
	}
	sl.pending = append(sl.pending, owned)
	sl.nextSeq += int64(len(owned))
	if sl.timer == nil {
		sl.timer = time.AfterFunc(sl.store.delay, sl.timerFired)
	}
	return nil
}

// bind sets the header of the log and the file it names.
func (sl *sessionLog) bind(h session.Header) error {
	line, err := h.MarshalJSON()
	if err != nil {
		return fmt.Errorf("jsonl: %w", err)
	}
	path := cleanPath(sl.store.root, h, sl.store.comp)
	if path == "" {
		return fmt.Errorf("jsonl: session id %q cannot name a file (empty or not UTF-8)", h.ID)
	}
	if h.SeedLength != nil {
		n := *h.SeedLength
		h.SeedLength = &n // the caller may change its copy
	}
	sl.header, sl.headerLine, sl.path = h, append(line, '\n'), path
	return nil
}

// sameHeader reports whether a and b are the same header.
func sameHeader(a, b session.Header) bool {
	if (a.SeedLength == nil) != (b.SeedLength == nil) || a.SeedLength != nil && *a.SeedLength != *b.SeedLength {
		return false
	}
	a.SeedLength, b.SeedLength = nil, nil
	return a == b
}

// probe looks at the file once, before the first event of this session is
// queued: a session that already has a transcript continues it.
func (sl *sessionLog) probe() error {
	s := sl.store
	other := filepath.Join(filepath.Dir(sl.path), plainFileName)
	if s.comp != CompressionZstd {
		other = filepath.Join(filepath.Dir(sl.path), zstdFileName)
	}
	if _, err := os.Lstat(other); err == nil {
		return fmt.Errorf("jsonl: session %q is stored as %s, but this store writes %s files", sl.id, other, s.comp)
	}
	fi, err := os.Lstat(sl.path)
	if errors.Is(err, fs.ErrNotExist) {
		// A session id names one transcript: refuse to start a second one
		// under another project directory (a header with another cwd).
		found, err := s.transcripts(sl.id)
		if err != nil {
			return err
		}
		if len(found) > 0 {
			return fmt.Errorf("jsonl: session %q already has a transcript at %s, not at %s", sl.id, found[0], sl.path)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("jsonl: session %q: %w", sl.id, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("jsonl: session %q: %s is not a regular file", sl.id, sl.path)
	}
	f, err := os.Open(sl.path)
	if err != nil {
		return fmt.Errorf("jsonl: session %q: %w", sl.id, err)
	}
	defer f.Close()
	res, err := scan(f, func(persistence.Event) error { return nil }, scanOpts{zstd: s.comp == CompressionZstd})
	if err != nil {
		return fmt.Errorf("jsonl: session %q: cannot continue %s: %w", sl.id, sl.path, err)
	}
	if !sameHeader(res.header, sl.header) {
		line, _ := res.header.MarshalJSON()
		return fmt.Errorf("jsonl: session %q: stored header %s differs from the appended header %s",
			sl.id, line, bytes.TrimSuffix(sl.headerLine, []byte("\n")))
	}
	sl.nextSeq, sl.onDisk, sl.size = res.events, true, res.committed
	return nil
}

func (sl *sessionLog) timerFired() {
	if err := sl.flush(); err != nil {
		sl.store.log.Error().Err(err).Str("session", sl.id).Msg("jsonl: batch write failed; its events stay queued until the next Append or Flush")
	}
}

// close stops the timer and refuses later appends.
func (sl *sessionLog) close() {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	sl.closed = true
	if sl.timer != nil {
		sl.timer.Stop()
		sl.timer = nil
	}
}

// flush writes the queued batch, if any, and fsyncs it. On failure the
// batch is queued again, ahead of events appended meanwhile.
func (sl *sessionLog) flush() error {
	sl.writeMu.Lock()
	defer sl.writeMu.Unlock()
	sl.mu.Lock()
	queued := sl.pending
	sl.pending = nil
	if sl.timer != nil {
		sl.timer.Stop()
		sl.timer = nil
	}
	sl.mu.Unlock()
	if len(queued) == 0 {
		return nil
	}
	batch := queued[0]
	if len(queued) > 1 {
		n := 0
		for _, q := range queued {
			n += len(q)
		}
		batch = make([]persistence.Event, 0, n)
		for _, q := range queued {
			batch = append(batch, q...)
		}
	}
	if err := sl.write(batch); err != nil {
		sl.mu.Lock()
		sl.pending = append([][]persistence.Event{batch}, sl.pending...)
		sl.mu.Unlock()
		return fmt.Errorf("jsonl: session %q: writing %d events: %w", sl.id, len(batch), err)
	}
	return nil
}

// write encodes batch and writes it as one durable unit: lines in a plain
// file, one frame in a zstd file.
func (sl *sessionLog) write(batch []persistence.Event) error {
	s := sl.store
	n := 0
	for i := range batch {
		n += len(batch[i].Data) + len(batch[i].Type) + 64
	}
	payload := appendBatch(make([]byte, 0, n), batch, s.packed)
	if s.enc != nil {
		payload = s.enc.EncodeAll(payload, nil)
	}
	if !sl.onDisk {
		return sl.create(payload)
	}
	return sl.appendFile(payload)
}

// appendFile writes payload after the valid prefix of the existing file,
// dropping a torn tail first, and rolls back on failure.
func (sl *sessionLog) appendFile(payload []byte) (err error) {
	f, err := os.OpenFile(sl.path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	switch {
	case fi.Size() < sl.size:
		return fmt.Errorf("%s is %d bytes, shorter than the %d bytes already written; was it changed by another writer?", sl.path, fi.Size(), sl.size)
	case fi.Size() > sl.size:
		sl.store.log.Warn().Str("session", sl.id).Int64("bytes", fi.Size()-sl.size).Msg("jsonl: dropping a torn tail before appending")
		if err := f.Truncate(sl.size); err != nil {
			return err
		}
	}
	if _, err := f.WriteAt(payload, sl.size); err != nil {
		_ = f.Truncate(sl.size)
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Truncate(sl.size)
		return err
	}
	sl.size += int64(len(payload))
	return nil
}

// create publishes the transcript atomically: the header and the first
// batch go to a temporary file in the session directory, which is fsynced
// and then linked into place (never replacing an existing file); the
// directories are fsynced so the new entries survive a crash.
func (sl *sessionLog) create(payload []byte) (err error) {
	s := sl.store
	dir := filepath.Dir(sl.path)
	project := filepath.Dir(dir)
	if err := mkdirs(s.root, project, dir); err != nil {
		return err
	}
	head := sl.headerLine
	if s.enc != nil {
		head = s.enc.EncodeAll(head, nil)
	}
	tmp, err := os.CreateTemp(dir, ".session-*.tmp")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(head); err != nil {
		return err
	}
	if _, err := tmp.Write(payload); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := publish(tmp.Name(), sl.path); err != nil {
		return err
	}
	for _, d := range []string{dir, project, s.root} {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	sl.onDisk = true
	sl.size = int64(len(head) + len(payload))
	s.log.Debug().Str("session", sl.id).Str("path", sl.path).Msg("jsonl: created transcript")
	return nil
}

// mkdirs creates the root, project and session directories (0700) as
// needed. When it creates the root it fsyncs the root's parent.
func mkdirs(root, project, dir string) error {
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(root, 0o700); err != nil {
			return err
		}
		if err := syncDir(filepath.Dir(root)); err != nil {
			return err
		}
	}
	for _, d := range []string{project, dir} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// publish gives the finished temporary file its final name without ever
// replacing an existing transcript: a hard link where the file system has
// them, else a rename after checking that the name is free.
func publish(tmp, path string) error {
	err := os.Link(tmp, path)
	if err == nil {
		return os.Remove(tmp)
	}
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s already exists: another writer created this session", path)
	}
	if _, serr := os.Lstat(path); serr == nil {
		return fmt.Errorf("%s already exists: another writer created this session", path)
	}
	return os.Rename(tmp, path)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
