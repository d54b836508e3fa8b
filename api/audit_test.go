package api

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func writeAudit(t *testing.T, n int) (string, [][]byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	a, err := OpenAudit(path, AuditOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		req := &sandbox.Request{Command: "c", CallID: "call-" + string(rune('a'+i)), Policy: sandbox.Policy{Name: "p"}}
		if err := a.Append(auditRecord(req, "", false, 0, nil, nil)); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	data, _ := os.ReadFile(path)
	return path, bytes.SplitAfter(data, []byte("\n"))[:n]
}

func TestVerifyAuditTamper(t *testing.T) {
	_, lines := writeAudit(t, 4)
	join := func(ls ...[]byte) []byte { return bytes.Join(ls, nil) }
	edited := bytes.Replace(lines[1], []byte("call-b"), []byte("call-x"), 1)
	cases := []struct {
		name string
		data []byte
		ok   bool
	}{
		{"Intact", join(lines...), true},
		{"Empty", nil, true},
		{"Edited", join(lines[0], edited, lines[2], lines[3]), false},
		{"Removed", join(lines[0], lines[2], lines[3]), false},
		{"RemovedFirst", join(lines[1], lines[2], lines[3]), false},
		{"Reordered", join(lines[0], lines[2], lines[1], lines[3]), false},
		{"Garbage", join(lines[0], []byte("not json\n")), false},
	}
	for _, tc := range cases {
		_, _, err := VerifyAudit(bytes.NewReader(tc.data))
		if (err == nil) != tc.ok {
			t.Errorf("VerifyAudit(%s) = %v, want ok=%t", tc.name, err, tc.ok)
		}
	}
}

func TestOpenAuditContinuesChainAndCutsTornLine(t *testing.T) {
	path, _ := writeAudit(t, 2)
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"executionId":"torn`)
	f.Close()
	a, err := OpenAudit(path, AuditOptions{})
	if err != nil {
		t.Fatalf("OpenAudit after a torn line = %v", err)
	}
	if st := a.Opened(); st.TornBytes != len(`{"executionId":"torn`) || st.Records != 2 {
		t.Errorf("Opened = %+v, want the torn bytes cut and 2 records", st)
	}
	if err := a.Append(auditRecord(&sandbox.Request{Command: "c", CallID: "call-z"}, "", true, 0, nil, nil)); err != nil {
		t.Fatal(err)
	}
	a.Close()
	data, _ := os.ReadFile(path)
	n, _, err := VerifyAudit(bytes.NewReader(data))
	if err != nil || n != 3 || strings.Contains(string(data), "torn") {
		t.Errorf("VerifyAudit after reopen = %d, %v; want 3 records without the torn line", n, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("audit log mode = %v, want 0600", fi.Mode().Perm())
	}
}

// appendN opens the log at path with o, appends n records and closes it.
func appendN(t *testing.T, path string, o AuditOptions, n int) {
	t.Helper()
	a, err := OpenAudit(path, o)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := a.Append(auditRecord(&sandbox.Request{Command: "c", CallID: "x"}, "", false, 0, nil, nil)); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
}

func TestOpenAuditChecksCheckpoint(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	for _, keyed := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "audit.jsonl")
		o := AuditOptions{Checkpoint: filepath.Join(t.TempDir(), "cp")}
		if keyed {
			o.Key = key
		}
		appendN(t, path, o, 3)
		good, _ := os.ReadFile(path)
		cpData, _ := os.ReadFile(o.Checkpoint)
		if len(cpData) != checkpointSize {
			t.Errorf("checkpoint is %d bytes, want %d", len(cpData), checkpointSize)
		}
		lines := bytes.SplitAfter(good, []byte("\n"))
		cases := []struct {
			name string
			log  []byte
			ok   bool
		}{
			{"Intact", good, true},
			{"LastDropped", bytes.Join(lines[:2], nil), false},
			{"AllDropped", nil, false},
			{"TailReplaced", append(bytes.Join(lines[:2], nil), bytes.Replace(lines[2], []byte(`"x"`), []byte(`"y"`), 1)...), false},
		}
		for _, tc := range cases {
			p := filepath.Join(dir, tc.name)
			os.WriteFile(p, tc.log, 0o600)
			c := o
			c.Checkpoint = p + ".cp"
			os.WriteFile(c.Checkpoint, cpData, 0o600)
			a, err := OpenAudit(p, c)
			if (err == nil) != tc.ok {
				t.Errorf("keyed %t: OpenAudit(%s) = %v, want ok=%t", keyed, tc.name, err, tc.ok)
			}
			if err == nil {
				a.Close()
			}
		}
		// One record past the checkpoint (a crash between the log's write
		// and the checkpoint's) is taken in, and the checkpoint catches up.
		p := filepath.Join(dir, "behind")
		c := o
		c.Checkpoint = p + ".cp"
		os.WriteFile(p, bytes.Join(lines[:2], nil), 0o600)
		appendN(t, p, c, 0)
		os.WriteFile(p, good, 0o600)
		a, err := OpenAudit(p, c)
		if err != nil {
			t.Fatalf("keyed %t: OpenAudit one record past its checkpoint = %v", keyed, err)
		}
		a.Close()
		got, err := ReadAuditCheckpoint(c.Checkpoint, o.Key)
		if err != nil || got.Records != 3 {
			t.Errorf("keyed %t: checkpoint after reopening = %+v, %v; want 3 records", keyed, got, err)
		}
		// Two records past it are not a crash.
		os.WriteFile(p, bytes.Join(lines[:1], nil), 0o600)
		os.Remove(c.Checkpoint)
		appendN(t, p, AuditOptions{Key: o.Key, Checkpoint: c.Checkpoint}, 0)
		os.WriteFile(p, good, 0o600)
		if _, err := OpenAudit(p, c); err == nil || !strings.Contains(err.Error(), "holds 3 records, more than its checkpoint's 1") {
			t.Errorf("keyed %t: OpenAudit two records past its checkpoint = %v", keyed, err)
		}
	}
}

func TestOpenAuditKeyMismatch(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	appendN(t, path, AuditOptions{}, 1)
	if _, err := OpenAudit(path, AuditOptions{Key: key}); err == nil || !strings.Contains(err.Error(), "carries no MAC") {
		t.Errorf("OpenAudit with a key on a log begun without = %v, want the unkeyed line named", err)
	}
	keyed := filepath.Join(t.TempDir(), "audit.jsonl")
	appendN(t, keyed, AuditOptions{Key: key}, 1)
	if _, err := OpenAudit(keyed, AuditOptions{}); err == nil || !strings.Contains(err.Error(), "no audit key is given") {
		t.Errorf("OpenAudit without a key on a keyed log = %v", err)
	}
	appendN(t, keyed, AuditOptions{Key: key}, 1) // the legitimate variant
	c, err := CheckAudit(bytes.NewReader(must(os.ReadFile(keyed))), key, nil)
	if err != nil || c.Records != 2 || c.MACs != 2 {
		t.Errorf("CheckAudit of the keyed log = %+v, %v; want 2 records, 2 MACs", c, err)
	}
}

func TestReopenRotationRestartsChainAndCheckpoint(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	o := AuditOptions{Checkpoint: filepath.Join(dir, "cp")}
	a, err := OpenAudit(path, o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	rec := auditRecord(&sandbox.Request{Command: "c", CallID: "x"}, "", false, 0, nil, nil)
	a.Append(rec)
	same, err := a.Reopen() // not rotated: the chain goes on
	if err != nil {
		t.Fatal(err)
	}
	a.Append(rec)
	os.Rename(path, path+".1")
	head, err := a.Reopen()
	if err != nil || head == same {
		t.Fatalf("Reopen after rotation = %q, %v; want the old file's head", head, err)
	}
	a.Append(rec)
	if c, err := CheckAudit(bytes.NewReader(must(os.ReadFile(path+".1"))), nil, nil); err != nil || c.Records != 2 || c.Head != head {
		t.Errorf("rotated file = %+v, %v; want 2 records ending at %s", c, err, head)
	}
	cp, err := ReadAuditCheckpoint(o.Checkpoint, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c, err := CheckAudit(bytes.NewReader(must(os.ReadFile(path))), nil, &cp); err != nil || c.Records != 1 {
		t.Errorf("new file against the checkpoint = %+v, %v; want 1 record", c, err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
