package jsonl

import (
	"bufio"
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
)

// jsonEqual reports whether a and b hold the same JSON value.
func jsonEqual(t testing.TB, a, b []byte) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal(a, &va); err != nil {
		t.Fatalf("json.Unmarshal(%s): %v", a, err)
	}
	if err := json.Unmarshal(b, &vb); err != nil {
		t.Fatalf("json.Unmarshal(%s): %v", b, err)
	}
	return reflect.DeepEqual(va, vb)
}

// sameEvents fails the test unless got and want are identical.
func sameEvents(t testing.TB, got, want []persistence.Event) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d", len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("event %d:\n got %+v (data %s)\nwant %+v (data %s)", i, got[i], got[i].Data, want[i], want[i].Data)
		}
	}
}

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
