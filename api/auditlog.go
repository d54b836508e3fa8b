package api

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"sync"

	"github.com/dsh-sandbox/dsh-sandbox/internal/safefile"
)

// MinAuditKeyBytes is the shortest operator audit key accepted.
const MinAuditKeyBytes = 32

// maxAuditKeyBytes bounds the audit key file.
const maxAuditKeyBytes = 4096

// checkpointSize is the fixed size of the checkpoint file: one JSON
// object padded with spaces, then a newline. Every update rewrites it in
// place with one write, so a reader sees the old or the new checkpoint.
const checkpointSize = 256

// macSuffix frames a record's MAC: a line with a MAC ends with
// `,"mac":"<64 hex>"}`, and without those bytes (and with its closing
// brace) it is the line the MAC was computed over.
const (
	macPrefix    = `,"mac":"`
	macSuffixLen = len(macPrefix) + 64 + len(`"}`)
)

// AuditOptions configure OpenAudit.
type AuditOptions struct {
	// Key is the operator's audit key (ReadAuditKey), kept outside the
	// data directory; nil means none. With a key every record carries
	// the HMAC-SHA256 of its line (AuditRecord.MAC) and the checkpoint
	// carries one too, so that whoever can write the log but does not
	// hold the key cannot forge records or a checkpoint that verify.
	Key []byte
	// Checkpoint is the file that holds the log's record count and head
	// hash after every append (AuditCheckpoint), stored apart from the
	// log; "" keeps none. Cutting records off the log's end, or
	// replacing its tail with a recomputed chain, then no longer matches
	// it.
	Checkpoint string
}

// AuditState is what OpenAudit found and did.
type AuditState struct {
	// Records and Head are the log's record count and head hash after
	// opening.
	Records int
	Head    string
	// TornBytes is the size of a torn last record (one without its
	// newline, left by a crash mid-write) that OpenAudit cut off; 0
	// means none.
	TornBytes int
	// CheckpointCreated says the checkpoint file did not exist and was
	// started from the log as found.
	CheckpointCreated bool
}

// AuditLog appends hash-chained records to a JSONL file. Create it with
// OpenAudit; it is safe for concurrent use. Each record is one write(2) of
// a whole line with O_APPEND, so a crash leaves at most a torn last line,
// which the next OpenAudit cuts off. After each record the checkpoint
// (when there is one) is rewritten in place, so it lags the log by at
// most the record a crash interrupted.
type AuditLog struct {
	mu     sync.Mutex
	path   string
	o      AuditOptions
	f      *os.File
	cp     *os.File // nil without a checkpoint
	prev   string
	n      int
	opened AuditState
}

// OpenAudit opens (creating 0600) the audit log at path, verifies the
// chain it already holds (and with o.Key every record's MAC), compares it
// with the checkpoint, and continues it. A torn final line (no newline)
// is removed first; AuditLog.Opened says so. A broken chain, a bad MAC,
// records without a MAC under a key (or with one and no key), and a log
// that no longer matches its checkpoint (records dropped from its end, a
// rewritten tail) are errors: the service must not continue a log that
// was tampered with. A missing checkpoint is started from the log.
func OpenAudit(path string, o AuditOptions) (*AuditLog, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	a := &AuditLog{path: path, o: o, f: f}
	if err := a.load(); err != nil {
		f.Close()
		if a.cp != nil {
			a.cp.Close()
		}
		return nil, err
	}
	return a, nil
}

// load reads the log, cuts a torn last line, verifies it against the
// checkpoint and sets the chain's head.
func (a *AuditLog) load() error {
	data, err := io.ReadAll(a.f)
	if err != nil {
		return fmt.Errorf("audit log %s: %w", a.path, err)
	}
	if i := bytes.LastIndexByte(data, '\n'); i+1 != len(data) {
		a.opened.TornBytes = len(data) - (i + 1)
		data = data[:i+1]
		if err := a.f.Truncate(int64(len(data))); err != nil {
			return fmt.Errorf("audit log %s: cutting a torn last record: %w", a.path, err)
		}
	}
	var cp *AuditCheckpoint
	if a.o.Checkpoint != "" {
		got, err := ReadAuditCheckpoint(a.o.Checkpoint, a.o.Key)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			a.opened.CheckpointCreated = true
		case err != nil:
			return err
		case a.o.Key == nil && got.MAC != "":
			return fmt.Errorf("audit checkpoint %s: carries a MAC but no audit key is given: give the key the log was written with", a.o.Checkpoint)
		default:
			cp = &got
		}
	}
	check, err := CheckAudit(bytes.NewReader(data), a.o.Key, cp)
	if err != nil {
		return fmt.Errorf("audit log %s: %w", a.path, err)
	}
	if a.o.Key == nil && check.MACs > 0 {
		return fmt.Errorf("audit log %s: %d records carry a MAC but no audit key is given: give the key the log was written with", a.path, check.MACs)
	}
	a.prev, a.n = check.Head, check.Records
	a.opened.Records, a.opened.Head = check.Records, check.Head
	if a.o.Checkpoint != "" {
		if a.cp, err = os.OpenFile(a.o.Checkpoint, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
			return fmt.Errorf("audit checkpoint: %w", err)
		}
		if err := a.writeCheckpoint(); err != nil {
			return err
		}
	}
	return nil
}

// Opened says what OpenAudit found: the record count and head, and
// whether it cut a torn last record or started the checkpoint.
func (a *AuditLog) Opened() AuditState { return a.opened }

// Reopen opens the log's path again, for log rotation: after the file was
// renamed, records go to a new file at the path, whose chain starts again
// at GenesisHash (each file verifies on its own) and so does the
// checkpoint; when the path is still the same file, its chain continues.
// It returns the head hash of the file written so far, to link the two
// chains. The file now at the path must be new (empty) or the same one.
// On error the old file stays in use.
func (a *AuditLog) Reopen() (previousHead string, err error) {
	a.mu.Lock() // appends wait: the new file must see every record
	defer a.mu.Unlock()
	old, err := a.f.Stat()
	if err != nil {
		return "", fmt.Errorf("audit log %s: %w", a.path, err)
	}
	if now, err := os.Stat(a.path); err == nil && os.SameFile(old, now) {
		return a.prev, nil
	}
	f, err := os.OpenFile(a.path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return "", fmt.Errorf("audit log: %w", err)
	}
	if fi, err := f.Stat(); err != nil || fi.Size() != 0 {
		f.Close()
		return "", fmt.Errorf("audit log %s: the file now at the path is not empty; the service only continues its own log or starts a new one", a.path)
	}
	head := a.prev
	_ = a.f.Sync()
	a.f.Close()
	a.f, a.prev, a.n = f, GenesisHash, 0
	if a.cp != nil {
		if err := a.writeCheckpoint(); err != nil {
			return head, err
		}
	}
	return head, nil
}

// Append writes rec with Prev set to the chain's head (and, with a key,
// its MAC), then the checkpoint.
func (a *AuditLog) Append(rec AuditRecord) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	rec.Prev, rec.MAC = a.prev, ""
	line, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("audit record: %w", err)
	}
	if a.o.Key != nil {
		line = withMAC(line, a.o.Key)
	}
	if _, err := a.f.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	a.prev = lineHash(line)
	a.n++
	if a.cp != nil {
		return a.writeCheckpoint()
	}
	return nil
}

// writeCheckpoint rewrites the checkpoint in place: one write of
// checkpointSize bytes at offset 0.
func (a *AuditLog) writeCheckpoint() error {
	cp := AuditCheckpoint{Records: a.n, Head: a.prev}
	if a.o.Key != nil {
		cp.MAC = cp.mac(a.o.Key)
	}
	data, err := json.Marshal(cp)
	if err != nil || len(data) >= checkpointSize {
		return fmt.Errorf("audit checkpoint: encoding: %v", err)
	}
	buf := bytes.Repeat([]byte{' '}, checkpointSize)
	copy(buf, data)
	buf[checkpointSize-1] = '\n'
	if _, err := a.cp.WriteAt(buf, 0); err != nil {
		return fmt.Errorf("audit checkpoint %s: %w", a.o.Checkpoint, err)
	}
	return nil
}

// Close closes the log and the checkpoint after syncing them.
func (a *AuditLog) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	_ = a.f.Sync()
	err := a.f.Close()
	if a.cp != nil {
		_ = a.cp.Sync()
		err = errors.Join(err, a.cp.Close())
	}
	return err
}

func lineHash(line []byte) string {
	sum := sha256.Sum256(line)
	return hex.EncodeToString(sum[:])
}

func macOf(key, data []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(data)
	return hex.EncodeToString(m.Sum(nil))
}

// withMAC returns line (a JSON object) with the field "mac" appended: the
// HMAC of line under key.
func withMAC(line, key []byte) []byte {
	out := make([]byte, 0, len(line)+macSuffixLen)
	out = append(out, line[:len(line)-1]...)
	out = append(out, macPrefix...)
	out = append(out, macOf(key, line)...)
	return append(out, `"}`...)
}

// splitMAC returns the line a record's MAC covers and the MAC, or ok
// false when the line does not end in a MAC field.
func splitMAC(line []byte) (bare []byte, mac string, ok bool) {
	if len(line) < macSuffixLen+2 || !bytes.HasSuffix(line, []byte(`"}`)) {
		return nil, "", false
	}
	tail := line[len(line)-macSuffixLen:]
	if !bytes.HasPrefix(tail, []byte(macPrefix)) {
		return nil, "", false
	}
	mac = string(tail[len(macPrefix) : len(macPrefix)+64])
	if _, err := hex.DecodeString(mac); err != nil {
		return nil, "", false
	}
	bare = append(bytes.Clone(line[:len(line)-macSuffixLen]), '}')
	return bare, mac, true
}

// AuditCheckpoint is the record count and head hash of an audit log, kept
// apart from it (AuditOptions.Checkpoint), with the HMAC of both under
// the operator's key when there is one.
type AuditCheckpoint struct {
	Records int    `json:"records"`
	Head    string `json:"head"`
	MAC     string `json:"mac,omitempty"`
}

func (cp AuditCheckpoint) mac(key []byte) string {
	return macOf(key, []byte("dsh-sandbox audit checkpoint\n"+strconv.Itoa(cp.Records)+"\n"+cp.Head+"\n"))
}

// ReadAuditCheckpoint reads the checkpoint file at path (as data: no link
// followed, a regular file, bounded) and, with key, checks its MAC
// (without one, a MAC it carries is not checked).
// A missing file wraps fs.ErrNotExist.
func ReadAuditCheckpoint(path string, key []byte) (AuditCheckpoint, error) {
	var cp AuditCheckpoint
	data, err := safefile.Read(path, safefile.Options{MaxBytes: 4096})
	if err != nil {
		return cp, fmt.Errorf("audit checkpoint: %w", err)
	}
	if err := json.Unmarshal(data, &cp); err != nil {
		return cp, fmt.Errorf("audit checkpoint %s: not a checkpoint: %v", path, err)
	}
	if cp.Records < 0 || len(cp.Head) != 64 {
		return cp, fmt.Errorf("audit checkpoint %s: not a checkpoint: records %d, head %q", path, cp.Records, cp.Head)
	}
	switch {
	case key != nil && cp.MAC == "":
		return cp, fmt.Errorf("audit checkpoint %s: carries no MAC, so it was not written under the audit key", path)
	case key != nil && !hmac.Equal([]byte(cp.MAC), []byte(cp.mac(key))):
		return cp, fmt.Errorf("audit checkpoint %s: its MAC does not match under the audit key: it was forged, or written under another key", path)
	}
	return cp, nil
}

// ReadAuditKey reads the operator's audit key from path: the file's
// content without surrounding white space, at least MinAuditKeyBytes
// bytes. The file must be owned by root or this process's user, written
// by nobody else, and lie outside each of outside (the data directory:
// whoever can rewrite the log must not also read the key there). It is
// read as data (safefile).
func ReadAuditKey(path string, outside ...safefile.Dir) ([]byte, error) {
	data, err := safefile.Read(path, safefile.Options{MaxBytes: maxAuditKeyBytes, OperatorOwned: true, Outside: outside})
	if err != nil {
		return nil, err
	}
	key := bytes.TrimSpace(data)
	if len(key) < MinAuditKeyBytes {
		return nil, fmt.Errorf("%s: the key is %d bytes, want at least %d (for example: head -c 32 /dev/urandom | base64 > %s)", path, len(key), MinAuditKeyBytes, path)
	}
	return key, nil
}

// AuditCheck is what CheckAudit checked.
type AuditCheck struct {
	// Records and Head are the number of records and the head hash
	// (the sha256 of the last line; GenesisHash for an empty log).
	Records int
	Head    string
	// MACs is how many records carry a MAC; with a key, every one was
	// checked.
	MACs int
	// Checkpoint is the checkpoint the log was compared with; nil for
	// none.
	Checkpoint *AuditCheckpoint
	// TornBytes is the size of a torn last record, one without its
	// newline that a crash mid-write leaves (OpenAudit cuts it); it is
	// not a record and not checked. 0 means none.
	TornBytes int
}

// readAuditLine reads one line with its newline (without one at the
// end of the log), at most maxAuditLine bytes; io.EOF at the end.
func readAuditLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxAuditLine {
			return nil, fmt.Errorf("longer than %d bytes", maxAuditLine)
		}
		switch {
		case err == bufio.ErrBufferFull:
			continue
		case err == io.EOF && len(line) > 0:
			return line, nil
		default:
			return line, err
		}
	}
}

// VerifyAudit checks the hash chain of an audit log (CheckAudit without
// a key or checkpoint) and returns its record count and head hash.
func VerifyAudit(r io.Reader) (records int, head string, err error) {
	c, err := CheckAudit(r, nil, nil)
	return c.Records, c.Head, err
}

// CheckAudit checks an audit log: every line is a JSON record whose prev
// is the sha256 of the line before it (GenesisHash for the first); with
// key, every record carries a MAC that matches; with cp, the log matches
// its checkpoint: record cp.Records has the head cp.Head, and at most one
// record follows it (the one a crash between the two writes leaves). An
// edited, removed or reordered line breaks the chain at the line after
// the change; a torn last line (no newline) is reported in TornBytes,
// not checked; without a checkpoint, cutting records off the end cannot be
// told, and without a key, a rewritten tail with a recomputed chain (and
// checkpoint) cannot. The error names the first line that fails.
func CheckAudit(r io.Reader, key []byte, cp *AuditCheckpoint) (AuditCheck, error) {
	c := AuditCheck{Head: GenesisHash, Checkpoint: cp}
	atCheckpoint := ""
	if cp != nil && cp.Records == 0 {
		atCheckpoint = GenesisHash
	}
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		n := c.Records + 1
		line, err := readAuditLine(br)
		if err == io.EOF {
			break
		}
		if err != nil {
			return c, fmt.Errorf("line %d: %w", n, err)
		}
		if line[len(line)-1] != '\n' {
			c.TornBytes = len(line) // a crash mid-write; OpenAudit cuts it
			break
		}
		line = line[:len(line)-1]
		if err := c.checkRecord(line, n, key); err != nil {
			return c, err
		}
		c.Records, c.Head = n, lineHash(line)
		if cp != nil && n == cp.Records {
			atCheckpoint = c.Head
		}
	}
	if cp == nil {
		return c, nil
	}
	return c, c.checkCheckpoint(cp, atCheckpoint)
}

// checkRecord checks line n (without its newline) against the chain so
// far: it is a JSON record whose prev is c.Head, its mac (if any) is the
// line's last field, and with key, the MAC matches. It counts the MAC in
// c.MACs; the caller advances c.Records and c.Head.
func (c *AuditCheck) checkRecord(line []byte, n int, key []byte) error {
	var rec struct {
		Prev *string `json:"prev"`
		MAC  string  `json:"mac"`
	}
	if err := json.Unmarshal(line, &rec); err != nil {
		return fmt.Errorf("line %d: not a JSON record: %v", n, err)
	}
	if rec.Prev == nil {
		return fmt.Errorf("line %d: no prev hash", n)
	}
	if *rec.Prev != c.Head {
		return fmt.Errorf("line %d: prev %q does not match the sha256 of line %d (%s): a line was edited, removed or reordered", n, *rec.Prev, n-1, c.Head)
	}
	bare, mac, hasMAC := splitMAC(line)
	if rec.MAC != "" && (!hasMAC || mac != rec.MAC) {
		return fmt.Errorf("line %d: its mac field is not the line's last field", n)
	}
	if hasMAC {
		c.MACs++
	}
	if key == nil {
		return nil
	}
	if !hasMAC {
		return fmt.Errorf("line %d: carries no MAC, so it was not written under the audit key (a log begun without a key must be rotated before one is used)", n)
	}
	if !hmac.Equal([]byte(mac), []byte(macOf(key, bare))) {
		return fmt.Errorf("line %d: its MAC does not match under the audit key: the record was forged or edited", n)
	}
	return nil
}

// checkCheckpoint compares a fully read log with its checkpoint cp:
// atCheckpoint is the hash of record cp.Records (GenesisHash for 0, ""
// if the log is shorter).
func (c *AuditCheck) checkCheckpoint(cp *AuditCheckpoint, atCheckpoint string) error {
	switch {
	case c.Records < cp.Records:
		return fmt.Errorf("holds %d records but its checkpoint counts %d (head %s): records were cut off its end", c.Records, cp.Records, cp.Head)
	case atCheckpoint != cp.Head:
		return fmt.Errorf("record %d has the hash %s, not the checkpoint's head %s: the log was rewritten", cp.Records, atCheckpoint, cp.Head)
	case c.Records > cp.Records+1:
		return fmt.Errorf("holds %d records, more than its checkpoint's %d and the one record a crash can leave unrecorded: records were added by something other than the service", c.Records, cp.Records)
	}
	return nil
}
