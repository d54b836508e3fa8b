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
	a, err := OpenAudit(path)
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
	a, err := OpenAudit(path)
	if err != nil {
		t.Fatalf("OpenAudit after a torn line = %v", err)
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
