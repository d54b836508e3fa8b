package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestServePolicyFiles: --policy-dir adds its *.yaml, *.yml and *.json
// files, in name order, after the --policy-file ones; a directory reached
// through a link is refused.
func TestServePolicyFiles(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"b.yml", "a.yaml", "c.json", "notes.txt", "d.YAML"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("{}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := servePolicyFiles([]string{"/etc/x.yaml"}, dir)
	want := []string{"/etc/x.yaml", filepath.Join(dir, "a.yaml"), filepath.Join(dir, "b.yml"), filepath.Join(dir, "c.json"), filepath.Join(dir, "d.YAML")}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("servePolicyFiles = %q, %v; want %q", got, err, want)
	}
	if got, err := servePolicyFiles([]string{"/etc/x.yaml"}, ""); err != nil || len(got) != 1 {
		t.Errorf("servePolicyFiles without a dir = %q, %v; want the files alone", got, err)
	}
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := servePolicyFiles(nil, link); err == nil || !strings.Contains(err.Error(), "--policy-dir") || !strings.Contains(err.Error(), "symbolic link") {
		t.Errorf("servePolicyFiles(link) = %v; want a refusal naming --policy-dir and the link", err)
	}
	if _, err := servePolicyFiles(nil, filepath.Join(dir, "none")); err == nil || !strings.Contains(err.Error(), "--policy-dir") {
		t.Errorf("servePolicyFiles(missing) = %v; want an error naming --policy-dir", err)
	}
}
