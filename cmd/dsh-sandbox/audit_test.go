package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api"
)

// writeAuditLog writes n records to dir/name with its checkpoint, under
// key (nil for none), and returns the log's path and lines.
func writeAuditLog(t *testing.T, dir, name string, key []byte, n int) (string, [][]byte) {
	t.Helper()
	path := filepath.Join(dir, name)
	a, err := api.OpenAudit(path, api.AuditOptions{Key: key, Checkpoint: path + checkpointSuffix})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := a.Append(api.AuditRecord{ExecutionID: fmt.Sprintf("call-%d", i+1), Policy: "ci"}); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	data, _ := os.ReadFile(path)
	return path, bytes.SplitAfter(data, []byte("\n"))[:n]
}

func sha(line []byte) string {
	sum := sha256.Sum256(bytes.TrimSuffix(line, []byte("\n")))
	return hex.EncodeToString(sum[:])
}

func TestAuditVerifyCase(t *testing.T) {
	dir := t.TempDir()
	path, lines := writeAuditLog(t, dir, "audit.jsonl", nil, 3)
	good := bytes.Join(lines, nil)
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		os.WriteFile(p, data, 0o600)
		return p
	}
	// The tail rewritten: record 3 edited (its prev still links to
	// record 2), the checkpoint left as the service wrote it.
	forged := bytes.Join([][]byte{lines[0], lines[1], bytes.Replace(lines[2], []byte("call-3"), []byte("call-X"), 1)}, nil)
	forgedPath := write("forged", forged)
	cp, _ := os.ReadFile(path + checkpointSuffix)
	write("forged"+checkpointSuffix, cp)
	dropped := write("dropped", bytes.Join(lines[:2], nil))
	write("dropped"+checkpointSuffix, cp)
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"Intact", []string{path}, 0, "ok: 3 records, head " + sha(lines[2])},
		{"IntactSaysCheckpoint", []string{path}, 0, "checkpoint: " + path + checkpointSuffix + " matches (3 records)"},
		{"DroppedLast", []string{dropped}, 1, "holds 2 records but its checkpoint counts 3"},
		{"ForgedTail", []string{forgedPath}, 1, "not the checkpoint's head"},
		{"Torn", []string{"--checkpoint", "none", write("torn", append(bytes.Clone(good), `{"executionId":"to`...))}, 0, "torn: 18 bytes without a newline follow record 3"},
		{"NoCheckpoint", []string{write("copy", good)}, 125, "--checkpoint none"},
		{"ChainAlone", []string{"--checkpoint", "none", write("copy2", good)}, 0, "checkpoint: not checked"},
		{"Edited", []string{"--checkpoint", "none", write("edited", bytes.Replace(good, []byte("call-1"), []byte("call-9"), 1))}, 1, "line 2"},
		{"Removed", []string{"--checkpoint", "none", write("removed", bytes.Join([][]byte{lines[0], lines[2]}, nil))}, 1, "line 2"},
		{"Reordered", []string{"--checkpoint", "none", write("reordered", bytes.Join([][]byte{lines[1], lines[0], lines[2]}, nil))}, 1, "line 1"},
		{"Missing", []string{"--checkpoint", "none", filepath.Join(dir, "nope")}, 125, "nope"},
	}
	for _, tc := range cases {
		stdout, stderr, code := run(t, append([]string{"audit", "verify"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
			t.Errorf("audit verify %s = %d %q %q, want %d mentioning %q", tc.name, code, stdout, stderr, tc.code, tc.want)
		}
	}
}

// TestAuditVerifyKeyCase: with the operator's key, a tail rewritten with
// a recomputed chain and a recomputed checkpoint (all an attacker
// without the key can do) fails, while the log as written passes.
func TestAuditVerifyKeyCase(t *testing.T) {
	dir, keyDir := t.TempDir(), t.TempDir()
	keyFile := filepath.Join(keyDir, "audit.key")
	key := []byte("0123456789abcdef0123456789abcdef-operator")
	os.WriteFile(keyFile, append(key, '\n'), 0o600)
	path, lines := writeAuditLog(t, dir, "audit.jsonl", key, 3)
	// Forge record 2 and re-link record 3 to it, keep the old MAC fields
	// (or drop them), and write a checkpoint for the new head.
	forge := func(name string, dropMACs bool) string {
		l2 := bytes.Replace(lines[1], []byte("call-2"), []byte("call-X"), 1)
		l3 := bytes.Replace(lines[2], []byte(sha(lines[1])), []byte(sha(l2)), 1)
		if dropMACs {
			strip := func(l []byte) []byte {
				i := bytes.Index(l, []byte(`,"mac":"`))
				return append(l[:i:i], "}\n"...)
			}
			l2 = strip(l2)
			l3 = bytes.Replace(strip(l3), []byte(sha(lines[1])), []byte(sha(l2)), 1)
		}
		p := filepath.Join(dir, name)
		os.WriteFile(p, bytes.Join([][]byte{lines[0], l2, l3}, nil), 0o600)
		os.WriteFile(p+checkpointSuffix, fmt.Appendf(nil, `{"records":3,"head":%q}`, sha(l3)), 0o600)
		return p
	}
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"Intact", []string{"--key", keyFile, path}, 0, "macs: 3 records checked"},
		{"IntactWithoutKey", []string{path}, 0, "not checked (no --key)"},
		{"ForgedKeepingMACs", []string{"--key", keyFile, "--checkpoint", "none", forge("forged", false)}, 1, "line 2: its MAC does not match"},
		{"ForgedCheckpoint", []string{"--key", keyFile, forge("forged2", false)}, 1, "carries no MAC"},
		{"ForgedWithoutMACs", []string{"--key", keyFile, "--checkpoint", "none", forge("forged3", true)}, 1, "line 2: carries no MAC"},
		{"WrongKey", []string{"--key", writeKey(t, "another-key-another-key-another-key"), path}, 1, "MAC does not match"},
	}
	for _, tc := range cases {
		stdout, stderr, code := run(t, append([]string{"audit", "verify"}, tc.args...)...)
		if code != tc.code || !strings.Contains(stdout+stderr, tc.want) {
			t.Errorf("audit verify %s = %d %q %q, want %d mentioning %q", tc.name, code, stdout, stderr, tc.code, tc.want)
		}
	}
	// A key file others may write, or a short key, is refused.
	loose := writeKey(t, string(key))
	os.Chmod(loose, 0o666)
	if _, stderr, code := run(t, "audit", "verify", "--key", loose, path); code != 2 || !strings.Contains(stderr, "writable by its group or by others") {
		t.Errorf("audit verify --key with a 0666 key = %d %q, want 2 naming the mode", code, stderr)
	}
	if _, stderr, code := run(t, "audit", "verify", "--key", writeKey(t, "short"), path); code != 2 || !strings.Contains(stderr, "at least 32") {
		t.Errorf("audit verify --key with a short key = %d %q, want 2", code, stderr)
	}
}

func writeKey(t *testing.T, key string) string {
	p := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(p, []byte(key), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
