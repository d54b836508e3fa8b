package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestEveryFlagIsDocumented: each flag of each command appears in the
// README or docs/*.md, so that --help and the docs do not drift apart.
func TestEveryFlagIsDocumented(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	var docs []byte
	for _, f := range append(files, "../../README.md") {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, data...)
	}
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			walk(path+" "+c.Name, c.Subcommands)
			for _, f := range c.Flags {
				name := f.Names()[0]
				dash := "--"
				if len(name) == 1 {
					dash = "-"
				}
				if !regexp.MustCompile(`(^|[^-\w])` + regexp.QuoteMeta(dash+name) + `\b`).Match(docs) {
					t.Errorf("%s%s: %s%s is in no doc (README.md, docs/*.md)", "dsh-sandbox", path+" "+c.Name, dash, name)
				}
			}
		}
	}
	walk("", newApp(nil, nil).Commands)
}
