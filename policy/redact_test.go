package policy

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestParseRedact(t *testing.T) {
	p, err := Parse([]byte("redact: {env: [OPENAI_API_KEY, DEPLOY_HOOK], files: [/run/secrets/b, /run/secrets/a], detectors: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"DEPLOY_HOOK", "OPENAI_API_KEY"}; !slices.Equal(p.RedactEnv, want) {
		t.Errorf("RedactEnv = %q, want %q (sorted)", p.RedactEnv, want)
	}
	if want := []string{"/run/secrets/a", "/run/secrets/b"}; !slices.Equal(p.RedactFiles, want) {
		t.Errorf("RedactFiles = %q, want %q (sorted)", p.RedactFiles, want)
	}
	if !p.RedactDetectors {
		t.Error("RedactDetectors = false, want true")
	}
	out, err := Format(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(out)
	if err != nil || !reflect.DeepEqual(back, p) {
		t.Errorf("Parse(Format(p)) = %+v, %v, want %+v\n%s", back, err, p, out)
	}
	x := Explain(p)
	for _, want := range []string{"DEPLOY_HOOK, OPENAI_API_KEY", "/run/secrets/a, /run/secrets/b", "base64"} {
		if !strings.Contains(x, want) {
			t.Errorf("Explain does not mention %q:\n%s", want, x)
		}
	}
	plain, err := Parse([]byte("name: x\n"))
	if err != nil {
		t.Fatal(err)
	}
	if plain.Digest == p.Digest || plain.RedactEnv != nil || plain.RedactFiles != nil || plain.RedactDetectors {
		t.Errorf("a policy without redact = %+v, want no redact fields and another digest", plain)
	}
}

func TestParseRedactInvalid(t *testing.T) {
	for _, tc := range []struct{ doc, field string }{
		{"redact: {env: [\"A=B\"]}", "redact.env[0]"},
		{"redact: {env: [X, X]}", "redact.env[1]"},
		{"redact: {files: [relative/path]}", "redact.files[0]"},
		{"redact: {files: [/a/../b]}", "redact.files[0]"},
		{"redact: {files: [/a, /a]}", "redact.files[1]"},
		{"redact: {values: [hunter2]}", "redact.values"},
		{"redact: {detectors: yes please}", "redact.detectors"},
	} {
		_, err := Parse([]byte(tc.doc))
		if err == nil || !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Parse(%q) = %v, want an invalid-argument error naming %s", tc.doc, err, tc.field)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Parse(%q) error %q shows a value", tc.doc, err)
		}
	}
}
