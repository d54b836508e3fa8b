package oci

import (
	"os"
	"path/filepath"
	"testing"
)

func TestLastLogErrorCases(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content, want string
	}{
		{"runc-json", `{"level":"warning","msg":"w","time":"t"}
{"level":"error","msg":"runc run failed: unable to start container process: exec: \"nope\": executable file not found in $PATH","time":"t"}
{"level":"warning","msg":"later warning"}
`, `runc run failed: unable to start container process: exec: "nope": executable file not found in $PATH`},
		{"crun-json", `{"msg": "mount ` + "`/x`" + `: No such file or directory", "level": "error", "time": "t"}` + "\n", "mount `/x`: No such file or directory"},
		{"plain", "something broke\n\n", "something broke"},
		{"empty", "", ""},
	} {
		p := filepath.Join(dir, tc.name)
		if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := lastLogError(p); got != tc.want {
			t.Errorf("lastLogError(%s) = %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := lastLogError(filepath.Join(dir, "missing")); got != "" {
		t.Errorf("lastLogError(missing) = %q, want \"\"", got)
	}
}

func TestUnescapeMountinfoCases(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`/a\040b`, "/a b"},
		{`/tab\011x`, "/tab\tx"},
		{`/back\134slash`, `/back\slash`},
		{`/plain`, "/plain"},
		{`/bad\09`, `/bad\09`},
	} {
		if got := unescapeMountinfo(tc.in); got != tc.want {
			t.Errorf("unescapeMountinfo(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
