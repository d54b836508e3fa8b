package sandboxtest

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf16"
)

// fixture is the on-disk world of one case: a workspace (the session's
// cwd) and a dsh home whose sessions root holds this session's
// transcript in the dsh JSONL layout (DESIGN §3.2). Every path is
// absolute and lies in the case's own temporary directories, owned by
// the test's user, so that `user: auto` picks that user.
type fixture struct {
	Workspace     string // the session cwd
	Home          string // DSH_HOME
	SessionsRoot  string // <Home>/sessions
	ProjectDir    string // <SessionsRoot>/--<project>--
	SessionID     string
	TranscriptDir string // <ProjectDir>/<encoded id>, mode 0700
	JSONL         string // <TranscriptDir>/session.jsonl, mode 0600
	Header        []byte // the header line written to JSONL, with its newline
}

// newFixture lays out a fresh workspace and sessions root for one case
// and a session with a random id whose header is already on disk.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	home := t.TempDir()
	fx := &fixture{
		Workspace:    t.TempDir(),
		Home:         home,
		SessionsRoot: filepath.Join(home, "sessions"),
		SessionID:    "sandboxtest-" + randomHex(8),
	}
	s, err := layoutSession(fx.SessionsRoot, fx.Workspace, fx.SessionID)
	if err != nil {
		t.Fatalf("lay out fake sessions root: %v", err)
	}
	fx.ProjectDir = filepath.Dir(s.Dir)
	fx.TranscriptDir = s.Dir
	fx.JSONL = s.File
	fx.Header = s.Header
	return fx
}

// snapshot is the trusted DSH_* snapshot of a call of this session,
// sorted, as the service builds it.
func (fx *fixture) snapshot() []string {
	return []string{
		"DSH_HOME=" + fx.Home,
		"DSH_SESSION_ID=" + fx.SessionID,
		"DSH_SESSION_JSONL=" + fx.JSONL,
		"DSH_SHELL=1",
	}
}

// fakeSession is one session written by layoutSession.
type fakeSession struct {
	Dir    string // the session directory
	File   string // its session.jsonl
	Header []byte // the header line, newline included
}

// layoutSession writes the header of session id, whose cwd is cwd, to
// <root>/<projectKey(cwd)>/<encodeSegment(id)>/session.jsonl, creating
// directories 0700 and the file 0600 as dsh does.
func layoutSession(root, cwd, id string) (fakeSession, error) {
	seg, err := encodeSegment(id)
	if err != nil {
		return fakeSession{}, err
	}
	dir := filepath.Join(root, projectKey(cwd), seg)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fakeSession{}, err
	}
	header, err := headerLine(id, cwd)
	if err != nil {
		return fakeSession{}, err
	}
	file := filepath.Join(dir, "session.jsonl")
	if err := os.WriteFile(file, header, 0o600); err != nil {
		return fakeSession{}, err
	}
	return fakeSession{Dir: dir, File: file, Header: header}, nil
}

// headerLine is a dsh session header line (DESIGN §3.1) with its
// newline: compact JSON, keys in dsh's order, no HTML escaping.
func headerLine(id, cwd string) ([]byte, error) {
	h := struct {
		Type            string `json:"type"`
		Version         int    `json:"version"`
		ID              string `json:"id"`
		CreatedAt       int64  `json:"createdAt"`
		Cwd             string `json:"cwd,omitempty"`
		DelegationDepth int    `json:"delegationDepth"`
	}{Type: "session", ID: id, CreatedAt: 1700000000000, Cwd: cwd}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(h); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// eventLine is a dsh event line (DESIGN §3.2) carrying text, with its
// newline, keys in dsh's order; the live-append case writes it while a
// call runs.
func eventLine(seq int, text string) []byte {
	ev := struct {
		Type string            `json:"type"`
		Seq  int               `json:"seq"`
		Time int64             `json:"time"`
		Data map[string]string `json:"data"`
	}{Type: "user/message", Seq: seq, Time: 1700000000001 + int64(seq), Data: map[string]string{"text": text}}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(ev) // cannot fail for these types
	return b.Bytes()
}

// safeUnit reports whether a UTF-16 code unit stays as is in a path
// segment or project slug.
func safeUnit(u uint16) bool {
	return 'a' <= u && u <= 'z' || 'A' <= u && u <= 'Z' || '0' <= u && u <= '9' ||
		u == '.' || u == '_' || u == '-'
}

// escapeUnit is "~" and the four upper-case hex digits of u.
func escapeUnit(u uint16) string { return fmt.Sprintf("~%04X", u) }

// encodeSegment is dsh's injective encoding of a session id as one path
// segment (DESIGN §3.2), written here from the contract rather than
// imported so that the suite depends on nothing but sandbox.
func encodeSegment(s string) (string, error) {
	switch s {
	case "":
		return "", errors.New("encodeSegment: empty segment")
	case ".":
		return "~002E", nil
	case "..":
		return "~002E~002E", nil
	}
	var b strings.Builder
	for _, u := range utf16.Encode([]rune(s)) {
		if safeUnit(u) {
			b.WriteByte(byte(u))
		} else {
			b.WriteString(escapeUnit(u))
		}
	}
	return b.String(), nil
}

// projectKey is dsh's project directory name for cwd (DESIGN §3.2).
func projectKey(cwd string) string {
	var b strings.Builder
	sep := false
	for _, u := range utf16.Encode([]rune(cwd)) {
		switch {
		case u == '/' || u == '\\' || u == ':':
			if !sep {
				b.WriteByte('-')
			}
			sep = true
			continue
		case safeUnit(u):
			b.WriteByte(byte(u))
		default:
			b.WriteString(escapeUnit(u))
		}
		sep = false
	}
	slug := strings.TrimLeft(b.String(), "-")
	if slug == "" {
		slug = "root"
	}
	if len(slug) > 251 {
		slug = slug[:251]
	}
	return "--" + slug + "--"
}

// randomHex returns 2n random hex digits.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails; see crypto/rand.Read
	return hex.EncodeToString(b)
}
