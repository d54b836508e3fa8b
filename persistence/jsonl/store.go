package jsonl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/rs/zerolog"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// DefaultBatchDelay is how long appended events wait in memory before
// their batch is written, when Options.BatchDelay is zero.
const DefaultBatchDelay = 200 * time.Millisecond

// ErrClosed is returned by Append, Flush, Load and List after Close.
var ErrClosed = errors.New("jsonl: store is closed")

// Options configures a Store.
type Options struct {
	// Root is the sessions root directory. Required; it must be absolute.
	// It is created (0700) on the first write if missing.
	Root string
	// Compression selects plain or zstd transcripts. The zero value ""
	// means CompressionNone.
	Compression Compression
	// BatchDelay is how long after the first queued event a session's
	// batch is written (later events join the batch without extending
	// it). Zero means DefaultBatchDelay; negative values are refused.
	BatchDelay time.Duration
	// Packed writes runs of three or more consecutive text, reasoning or
	// tool-call delta chunks of the same block as one packed row. Reading
	// never depends on it. The zero value writes one event per line.
	Packed bool
	// Logger receives background write failures and first creations. The
	// zero value is disabled.
	Logger zerolog.Logger
}

// Store is the JSONL session store. It is safe for concurrent use by any
// number of sessions; within one session, Append calls are serialized and
// must carry contiguous seqs. A Store assumes it is the only writer of the
// sessions it appends to. Create it with New; the zero value is not usable.
type Store struct {
	root   string
	comp   Compression
	delay  time.Duration
	packed bool
	log    zerolog.Logger
	enc    *zstd.Encoder // nil unless comp is CompressionZstd

	mu       sync.Mutex
	sessions map[string]*sessionLog
	closed   bool
}

var _ persistence.Store = (*Store)(nil)

// New returns a Store for opts. It performs no I/O: nothing is created
// until the first batch is written.
func New(opts Options) (*Store, error) {
	if opts.Root == "" {
		return nil, errors.New("jsonl: Options.Root is required")
	}
	if !filepath.IsAbs(opts.Root) {
		return nil, fmt.Errorf("jsonl: Options.Root %q must be an absolute path", opts.Root)
	}
	comp := opts.Compression
	if comp == "" {
		comp = CompressionNone
	}
	if _, err := ParseCompression(string(comp)); err != nil {
		return nil, fmt.Errorf("jsonl: Options.Compression: %w", err)
	}
	if opts.BatchDelay < 0 {
		return nil, fmt.Errorf("jsonl: Options.BatchDelay %v must not be negative", opts.BatchDelay)
	}
	s := &Store{
		root:     filepath.Clean(opts.Root),
		comp:     comp,
		delay:    cmp.Or(opts.BatchDelay, DefaultBatchDelay),
		packed:   opts.Packed,
		log:      opts.Logger,
		sessions: make(map[string]*sessionLog),
	}
	if comp == CompressionZstd {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true), zstd.WithEncoderConcurrency(1))
		if err != nil {
			return nil, fmt.Errorf("jsonl: zstd encoder: %w", err)
		}
		s.enc = enc
	}
	return s, nil
}

// Locate returns the transcript file of h: kind "jsonl" and the absolute
// path, which may not exist yet. It reads, creates and flushes nothing and
// allocates only the path. ok is false when h.ID cannot name a file
// (empty or not UTF-8).
func (s *Store) Locate(h session.Header) (persistence.Location, bool) {
	p := cleanPath(s.root, h, s.comp)
	if p == "" {
		return persistence.Location{}, false
	}
	return persistence.Location{Kind: persistence.KindJSONL, Path: p}, true
}

// Append checks events and queues them for h's log; they are written
// after BatchDelay or by Flush. The first event of a session new to this
// Store must continue what is on disk (seq 0 for a session without a
// file); each event's Seq must follow the previous one, or Append fails
// with an error wrapping persistence.ErrSeqGap and queues nothing. Events
// are copied: the caller may reuse them once Append returns. Appending
// no events is a no-op that creates nothing.
//
// The first Append of a session in this Store reads its transcript if one
// exists, to continue its seq (a torn tail is dropped before the next
// write), and refuses a header that differs from the stored one or a
// session id that already has a transcript elsewhere under Root. Later
// Appends of the session must pass the same header.
func (s *Store) Append(ctx context.Context, h session.Header, events ...persistence.Event) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(events) == 0 {
		return nil
	}
	sl, err := s.session(h.ID)
	if err != nil {
		return err
	}
	return sl.append(h, events)
}

// session returns the write state of the session with id, creating it on
// first use.
func (s *Store) session(id string) (*sessionLog, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	sl, ok := s.sessions[id]
	if !ok {
		sl = &sessionLog{store: s, id: id}
		s.sessions[id] = sl
	}
	return sl, nil
}

// snapshot returns the sessions this Store has seen.
func (s *Store) snapshot() ([]*sessionLog, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	out := make([]*sessionLog, 0, len(s.sessions))
	for _, sl := range s.sessions {
		out = append(out, sl)
	}
	return out, nil
}

// Flush writes every queued batch of every session and fsyncs it (and
// the directories of newly created files). When it returns nil, every
// event appended before the call is durable. A batch that fails to write
// stays queued and its error is returned; the next Flush retries it.
func (s *Store) Flush(ctx context.Context) error {
	sessions, err := s.snapshot()
	if err != nil {
		return err
	}
	var errs []error
	for _, sl := range sessions {
		if err := ctx.Err(); err != nil {
			return errors.Join(append(errs, err)...)
		}
		if err := sl.flush(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Load reads the session with id from disk, looking in every project
// directory under Root, after writing any batch this Store still holds
// for it. It fails with an error wrapping persistence.ErrNotFound when no
// transcript exists, and refuses a transcript whose header does not name
// id or whose location does not match its header.
func (s *Store) Load(ctx context.Context, id string) (*persistence.Log, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	sl, closed := s.sessions[id], s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if sl != nil {
		if err := sl.flush(); err != nil {
			return nil, err
		}
	}
	path, err := s.find(id)
	if err != nil {
		return nil, err
	}
	log, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	if log.Header.ID != id {
		return nil, fmt.Errorf("jsonl: %s: header id %q, want %q", path, log.Header.ID, id)
	}
	if err := s.checkLocation(path, log.Header); err != nil {
		return nil, err
	}
	return log, nil
}

// find returns the one transcript of id under Root.
func (s *Store) find(id string) (string, error) {
	found, err := s.transcripts(id)
	if err != nil {
		return "", err
	}
	switch len(found) {
	case 0:
		return "", fmt.Errorf("jsonl: session %q: %w", id, persistence.ErrNotFound)
	case 1:
		return found[0], nil
	}
	return "", fmt.Errorf("jsonl: session %q has %d transcripts (%q); refusing to choose", id, len(found), found)
}

// transcripts returns every transcript file of id under Root, in any
// project directory and either encoding. Symbolic links are not followed.
func (s *Store) transcripts(id string) ([]string, error) {
	seg, err := EncodeSegment(id)
	if err != nil {
		return nil, fmt.Errorf("jsonl: session id %q: %w", id, err)
	}
	projects, err := os.ReadDir(s.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var found []string
	for _, p := range projects {
		if !p.IsDir() {
			continue
		}
		for _, name := range []string{plainFileName, zstdFileName} {
			path := filepath.Join(s.root, p.Name(), seg, name)
			if fi, err := os.Lstat(path); err == nil && fi.Mode().IsRegular() {
				found = append(found, path)
			}
		}
	}
	return found, nil
}

// checkLocation refuses a transcript that is not where its header says.
func (s *Store) checkLocation(path string, h session.Header) error {
	c := CompressionNone
	if filepath.Base(path) == zstdFileName {
		c = CompressionZstd
	}
	if want := Path(s.root, h, c); want != path {
		return fmt.Errorf("jsonl: %s: header of session %q belongs at %s", path, h.ID, want)
	}
	return nil
}

// List writes any batches this Store holds and returns the header and
// location of every transcript under Root (two levels deep), ordered by
// creation time and then id. Entries that are not transcripts, and
// symbolic links, are skipped; a transcript whose header cannot be read or
// whose location does not match its header is an error.
func (s *Store) List(ctx context.Context) ([]persistence.Info, error) {
	if err := s.Flush(ctx); err != nil {
		return nil, err
	}
	projects, err := os.ReadDir(s.root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var infos []persistence.Info
	seen := make(map[string]string)
	for _, p := range projects {
		if !p.IsDir() {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		dir := filepath.Join(s.root, p.Name())
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if !e.IsDir() {
				continue
			}
			for _, name := range []string{plainFileName, zstdFileName} {
				path := filepath.Join(dir, e.Name(), name)
				if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() {
					continue
				}
				h, err := readHeader(path)
				if err != nil {
					return nil, err
				}
				if err := s.checkLocation(path, h); err != nil {
					return nil, err
				}
				if other, dup := seen[h.ID]; dup {
					return nil, fmt.Errorf("jsonl: session %q has two transcripts, %s and %s", h.ID, other, path)
				}
				seen[h.ID] = path
				infos = append(infos, persistence.Info{
					Header:   h,
					Location: persistence.Location{Kind: persistence.KindJSONL, Path: path},
				})
			}
		}
	}
	slices.SortFunc(infos, func(a, b persistence.Info) int {
		return cmp.Or(cmp.Compare(a.Header.CreatedAt, b.Header.CreatedAt), cmp.Compare(a.Header.ID, b.Header.ID))
	})
	return infos, nil
}

// readHeader reads only the header of the transcript at path.
func readHeader(path string) (session.Header, error) {
	f, err := os.Open(path)
	if err != nil {
		return session.Header{}, err
	}
	defer f.Close()
	res, err := scan(f, nil, scanOpts{zstd: filepath.Base(path) == zstdFileName, headerOnly: true})
	if err != nil {
		return session.Header{}, fmt.Errorf("%s: %w", path, err)
	}
	return res.header, nil
}

// Close makes later calls fail with ErrClosed, stops the batch timers and
// writes and fsyncs every queued batch. Closing twice is a no-op.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sessions := make([]*sessionLog, 0, len(s.sessions))
	for _, sl := range s.sessions {
		sessions = append(sessions, sl)
	}
	s.mu.Unlock()
	var errs []error
	for _, sl := range sessions {
		sl.close()
		if err := sl.flush(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
