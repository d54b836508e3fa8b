package sandboxtest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// topKeys returns the top-level keys of a JSON object in file order.
func topKeys(t *testing.T, line []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("%q is not a JSON object", line)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// sameOrder reports whether the keys both lists share appear in the same
// relative order.
func sameOrder(a, b []string) bool {
	pos := map[string]int{}
	for i, k := range b {
		pos[k] = i
	}
	last := -1
	for _, k := range a {
		if i, ok := pos[k]; ok {
			if i < last {
				return false
			}
			last = i
		}
	}
	return true
}

// TestFakeLinesMatchRealDSH checks that the header and event lines the
// suite writes have the key order of real dsh logs, so that a reader
// built for dsh accepts the fake sessions root.
func TestFakeLinesMatchRealDSH(t *testing.T) {
	dir := fixtures.DSHSessions(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dsh session logs in %s (err %v)", dir, err)
	}
	header, err := headerLine("id", "/work")
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string][]string{"session": topKeys(t, header), "event": topKeys(t, eventLine(0, "x"))}
	checked := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 16<<20)
		for n := 0; sc.Scan() && n < 5; n++ {
			line := sc.Bytes()
			kind := "event"
			if strings.HasPrefix(string(line), `{"type":"session"`) {
				kind = "session"
			}
			if strings.Contains(string(line), `"seq0"`) {
				continue // packed rows have their own shape
			}
			if real := topKeys(t, line); !sameOrder(ours[kind], real) {
				t.Errorf("%s: %s keys %q, ours %q: order differs", filepath.Base(f), kind, real, ours[kind])
			}
			checked++
		}
	}
	if checked == 0 {
		t.Error("no lines checked")
	}
}
