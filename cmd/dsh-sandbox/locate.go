package main

import (
	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

func locateCommand() *cli.Command {
	return &cli.Command{
		Name:  "locate",
		Usage: "print where the session's transcript lives, or null; creates nothing",
		Description: `Prints {"kind":"jsonl","path":…} for the JSONL store, or null when the store has no
per-session local file (SQLite). It reads, creates and flushes nothing.

Example:
   dsh-sandbox locate --sessions-root /r --cwd /srv/proj --session-id abc
   {"kind":"jsonl","path":"/r/--srv-proj--/abc/session.jsonl.zstd"}
   dsh-sandbox locate --sessions-root /r --compression none --cwd /srv/proj/ --session-id abc
   {"kind":"jsonl","path":"/r/--srv-proj---/abc/session.jsonl"}

The header's cwd is --cwd as written (dsh encodes it unclean), the current directory
without it.`,
		Action: func(c *cli.Context) error {
			s, err := loadSettings(c)
			if err != nil {
				return err
			}
			if s.header == nil {
				return usageError("locate needs --session-id")
			}
			loc, ok := s.locator().Locate(*s.header)
			if !ok {
				return writeJSON(c.App.Writer, nil)
			}
			return writeJSON(c.App.Writer, loc)
		},
	}
}

// locator returns the persistence service that answers Locate for these
// settings without opening or creating anything.
func (s *settings) locator() persistence.Locator {
	if s.persistence == "sqlite" {
		return noLocation{}
	}
	return jsonlLocation{root: s.sessionsRoot, compression: s.compression}
}

// jsonlLocation is the Locate of the JSONL store, usable without building
// a store.
type jsonlLocation struct {
	root        string
	compression jsonl.Compression
}

func (l jsonlLocation) Locate(h session.Header) (persistence.Location, bool) {
	p := jsonl.Path(l.root, h, l.compression)
	if p == "" {
		return persistence.Location{}, false
	}
	return persistence.Location{Kind: persistence.KindJSONL, Path: p}, true
}

// noLocation is the Locate of a store without per-session local files
// (SQLite), usable without opening the database.
type noLocation struct{}

func (noLocation) Locate(session.Header) (persistence.Location, bool) {
	return persistence.Location{}, false
}
