package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// DefaultBusyTimeout is how long a statement waits for a lock held by
// another connection or process before it fails, when Options.BusyTimeout
// is zero.
const DefaultBusyTimeout = 5 * time.Second

// ErrClosed is wrapped by the error of every call made after Close.
var ErrClosed = errors.New("sqlite session store is closed")

// Options configures Open.
type Options struct {
	// Path is the database file, an absolute path. Required. The file is
	// created with mode 0600 and its parent directories with mode 0700 when
	// they are missing; an existing file or directory keeps its mode.
	Path string
	// BusyTimeout is how long a statement waits for a lock held by another
	// connection or process (say a CLI and a service sharing the file)
	// before it fails. Zero means DefaultBusyTimeout; negative is an error.
	BusyTimeout time.Duration
	// Logger receives debug events (field "session" for the session id).
	// It never receives event data. The zero value logs nothing.
	Logger zerolog.Logger
}

// Store is a persistence.Store on one SQLite database file. It is safe for
// concurrent use: writes are serialized through one connection (and, across
// processes, by SQLite's own locks) while Load and List read in parallel
// from a pool. The zero value is not usable; call Open.
type Store struct {
	path string
	log  zerolog.Logger
	// writer has exactly one connection; every write transaction runs on
	// it, begun IMMEDIATE so that it takes the write lock up front.
	writer *sql.DB
	// reader is a pool of query-only connections for Load and List.
	reader *sql.DB
	closed atomic.Bool
}

var _ persistence.Store = (*Store)(nil)

// Open opens, or creates, the session database at opts.Path, brings its
// schema up to date and returns the store. It refuses a database written by
// a newer schema and an SQLite file that holds other tables but no
// dsh-sandbox schema.
func Open(ctx context.Context, opts Options) (*Store, error) {
	if opts.Path == "" {
		return nil, errors.New("sqlite: Options.Path is required")
	}
	if !filepath.IsAbs(opts.Path) {
		return nil, fmt.Errorf("sqlite: Options.Path %q is not an absolute path", opts.Path)
	}
	if opts.BusyTimeout < 0 {
		return nil, fmt.Errorf("sqlite: Options.BusyTimeout %v is negative", opts.BusyTimeout)
	}
	busy := opts.BusyTimeout
	if busy == 0 {
		busy = DefaultBusyTimeout
	}
	path := filepath.Clean(opts.Path)
	if err := createFile(path); err != nil {
		return nil, err
	}

	s := &Store{path: path, log: opts.Logger}
	ok := false
	defer func() {
		if !ok {
			s.closeDBs()
		}
	}()

	var err error
	if s.writer, err = sql.Open("sqlite", dsn(path, busy, true)); err != nil {
		return nil, fmt.Errorf("sqlite: open %q: %w", path, err)
	}
	s.writer.SetMaxOpenConns(1)
	s.writer.SetMaxIdleConns(1)
	if err := checkJournalMode(ctx, s.writer); err != nil {
		return nil, fmt.Errorf("sqlite: open %q: %w", path, err)
	}
	if err := migrate(ctx, s.writer); err != nil {
		return nil, fmt.Errorf("sqlite: open %q: %w", path, err)
	}

	if s.reader, err = sql.Open("sqlite", dsn(path, busy, false)); err != nil {
		return nil, fmt.Errorf("sqlite: open %q for reading: %w", path, err)
	}
	readers := max(4, runtime.GOMAXPROCS(0))
	s.reader.SetMaxOpenConns(readers)
	s.reader.SetMaxIdleConns(readers)
	if err := s.reader.PingContext(ctx); err != nil {
		return nil, fmt.Errorf("sqlite: open %q for reading: %w", path, err)
	}

	ok = true
	s.log.Debug().Str("path", path).Msg("session database opened")
	return s, nil
}

// createFile makes path's parent directories (0700) and the file itself
// (0600) when they are missing. SQLite creates its -wal and -shm files with
// the mode of the database file, so they stay private too.
func createFile(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("sqlite: create the directory of %q: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sqlite: create %q: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("sqlite: create %q: %w", path, err)
	}
	return nil
}

// dsn builds the driver's data source name: a file: URI (so that any byte
// of path, '?' and '#' included, survives escaped) carrying the per
// connection settings.
//
// Durability: the writer runs WAL with synchronous=FULL, so SQLite syncs
// the WAL on every COMMIT and a transaction that returned is durable across
// power loss. synchronous=NORMAL in WAL mode would only sync at checkpoints
// and could lose the last commits, which would turn Flush into a lie; one
// sync per Append is the price, and callers batch their events.
func dsn(path string, busy time.Duration, writer bool) string {
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(busy.Milliseconds(), 10))
	q.Set("_foreign_keys", "1")
	if writer {
		q.Set("_journal_mode", "WAL")
		q.Set("_synchronous", "FULL")
		q.Set("_txlock", "immediate")
	} else {
		q.Set("_query_only", "1")
	}
	u := url.URL{Scheme: "file", Path: path, RawQuery: q.Encode()}
	return u.String()
}

// checkJournalMode fails unless the database really runs in WAL mode: on a
// file system without shared memory support SQLite keeps its old mode
// without an error, and the durability argument of dsn would not hold.
func checkJournalMode(ctx context.Context, db *sql.DB) error {
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		return fmt.Errorf("read journal_mode: %w", err)
	}
	if mode != "wal" {
		return fmt.Errorf("journal_mode is %q, want \"wal\"", mode)
	}
	return nil
}

// Locate always returns ok=false: the store keeps no per-session local
// file a sandboxed command could read. It performs no I/O.
func (s *Store) Locate(session.Header) (persistence.Location, bool) {
	return persistence.Location{}, false
}

// Flush returns nil without doing anything (but ErrClosed after Close):
// every Append commits a transaction that is durable when Append returns.
func (s *Store) Flush(context.Context) error {
	if s.closed.Load() {
		return fmt.Errorf("sqlite: flush: %w", ErrClosed)
	}
	return nil
}

// Close waits for running calls to finish and closes the database. Later
// calls fail with ErrClosed; a second Close returns nil.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	if err := s.closeDBs(); err != nil {
		return fmt.Errorf("sqlite: close %q: %w", s.path, err)
	}
	s.log.Debug().Str("path", s.path).Msg("session database closed")
	return nil
}

// closeDBs closes the reader pool, then the writer, whose connection is
// the last one and so checkpoints the WAL into the database file.
func (s *Store) closeDBs() error {
	var errs []error
	if s.reader != nil {
		errs = append(errs, s.reader.Close())
	}
	if s.writer != nil {
		errs = append(errs, s.writer.Close())
	}
	return errors.Join(errs...)
}
