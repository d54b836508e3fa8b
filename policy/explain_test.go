package policy

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading golden file (run go test -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("%s: got\n%s\nwant (%s)\n%s", name, got, path, want)
	}
}

func TestExplainGolden(t *testing.T) {
	for _, name := range Builtins() {
		t.Run(name, func(t *testing.T) {
			checkGolden(t, "explain-"+name, Explain(builtin(t, name)))
		})
	}
	custom := map[string]string{
		"custom": fullYAML,
		"local":  "name: dev\nbackend: local\nenv: {inherit: [], set: {SECRET_TOKEN: hunter2}}\n",
	}
	for name, doc := range custom {
		t.Run(name, func(t *testing.T) {
			p, err := Parse([]byte(doc))
			if err != nil {
				t.Fatal(err)
			}
			got := Explain(p)
			if strings.Contains(got, "hunter2") || strings.Contains(got, "-mod=mod") {
				t.Errorf("Explain(%s) shows an env value:\n%s", name, got)
			}
			checkGolden(t, "explain-"+name, got)
		})
	}
}

func TestExplainInvalid(t *testing.T) {
	got := Explain(sandbox.Policy{Name: "x"})
	if !strings.HasPrefix(got, "policy: ") || !strings.Contains(got, "backend") || strings.Count(got, "\n") != 1 {
		t.Errorf("Explain(invalid) = %q, want one line naming the invalid fields", got)
	}
}
