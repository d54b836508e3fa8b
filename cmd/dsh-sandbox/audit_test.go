package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api"
)

func TestAuditVerifyCase(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.jsonl")
	a, err := api.OpenAudit(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"call-1", "call-2", "call-3"} {
		if err := a.Append(api.AuditRecord{ExecutionID: id, Policy: "ci"}); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	good, _ := os.ReadFile(path)
	lines := bytes.SplitAfter(good, []byte("\n"))
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, data, 0o600)
		return p
	}
	cases := []struct {
		name string
		file string
		code int
		want string
	}{
		{"Intact", path, 0, "ok: 3 records"},
		{"Edited", write("edited", bytes.Replace(good, []byte("call-1"), []byte("call-9"), 1)), 1, "line 2"},
		{"Removed", write("removed", bytes.Join([][]byte{lines[0], lines[2]}, nil)), 1, "line 2"},
		{"Reordered", write("reordered", bytes.Join([][]byte{lines[1], lines[0], lines[2]}, nil)), 1, "line 1"},
		{"Missing", filepath.Join(dir, "nope"), 125, "nope"},
	}
	for _, tc := range cases {
		stdout, stderr, code := run(t, "audit", "verify", tc.file)
		if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
			t.Errorf("audit verify %s = %d %q %q, want %d mentioning %q", tc.name, code, stdout, stderr, tc.code, tc.want)
		}
	}
}
