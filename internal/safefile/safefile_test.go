package safefile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestReadCase(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // not subject to the umask
			t.Fatal(err)
		}
		return p
	}
	regular := write("policy.yaml", "name: p\n", 0o644)
	big := write("big.yaml", strings.Repeat("x", 101), 0o644)
	groupWritable := write("gw.yaml", "name: p\n", 0o664)
	worldWritable := write("ww.yaml", "name: p\n", 0o646)
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(regular, link); err != nil {
		t.Fatal(err)
	}
	linkDir := filepath.Join(dir, "linkdir")
	if err := os.Symlink(dir, linkDir); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	inWS := filepath.Join(ws, "sub", "evil.yaml")
	if err := os.WriteFile(inWS, []byte("name: p\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wsLink := filepath.Join(dir, "ws-link") // another path to the workspace
	if err := os.Symlink(ws, wsLink); err != nil {
		t.Fatal(err)
	}
	strict := func(outside ...Dir) Options { return Options{MaxBytes: 100, OperatorOwned: true, Outside: outside} }
	plain := Options{MaxBytes: 100}

	tests := []struct {
		name string
		path string
		o    Options
		want string // "" for success, else a substring of the error
	}{
		{"regular", regular, plain, ""},
		{"regular, operator checks", regular, strict(Dir{"the workspace", ws}), ""},
		{"regular, outside a missing directory", regular, strict(Dir{"the workspace", filepath.Join(dir, "nope")}), ""},
		{"symlink", link, plain, "is a symbolic link"},
		{"symlink in a directory component", filepath.Join(linkDir, "policy.yaml"), plain, dir + "/linkdir is a symbolic link"},
		{"fifo", fifo, plain, "is a FIFO"},
		{"directory", dir, plain, "is a directory"},
		{"root directory", "/", plain, "is a directory"},
		{"character device", "/dev/null", plain, "is a character device"},
		{"too big", big, plain, "larger than the limit of 100"},
		{"missing", filepath.Join(dir, "missing.yaml"), plain, "no such file"},
		{"file as a directory component", filepath.Join(regular, "x.yaml"), plain, "is not a directory"},
		{"group-writable, no operator checks", groupWritable, plain, ""},
		{"group-writable", groupWritable, strict(), "writable by its group or by others (mode 0664)"},
		{"world-writable", worldWritable, strict(), "mode 0646"},
		{"inside the workspace", inWS, strict(Dir{"the workspace", ws}), "lies inside the workspace " + ws},
		{"inside the workspace named through a link", inWS, strict(Dir{"workspace root", wsLink}), "lies inside workspace root " + wsLink},
		{"inside the workspace, no operator checks", inWS, plain, ""},
		{"NUL byte", regular + "\x00", plain, "NUL"},
		{"empty", "", plain, "empty file name"},
		{"no bound", regular, Options{}, "MaxBytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := Read(tt.path, tt.o)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Read(%q) = %v, want the file", tt.path, err)
			case tt.want == "" && string(data) != "name: p\n":
				t.Fatalf("Read(%q) = %q, want %q", tt.path, data, "name: p\n")
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Read(%q) = %q, %v; want an error containing %q", tt.path, data, err, tt.want)
			case tt.want != "" && tt.path != "" && !strings.Contains(err.Error(), strings.TrimSuffix(tt.path, "\x00")):
				t.Errorf("Read(%q) error %q does not name the file", tt.path, err)
			}
		})
	}
}

func TestReadMissingIsNotExist(t *testing.T) {
	_, err := Read(filepath.Join(t.TempDir(), "missing.json"), Options{MaxBytes: 10})
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read(missing) = %v, want an error wrapping fs.ErrNotExist", err)
	}
}

func TestReadRelativePath(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "c.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	if data, err := Read("c.json", Options{MaxBytes: 10}); err != nil || string(data) != "{}" {
		t.Errorf(`Read("c.json") = %q, %v; want "{}"`, data, err)
	}
	if _, err := Read("c.json", Options{MaxBytes: 10, OperatorOwned: true, Outside: []Dir{{"the workspace", "."}}}); err == nil ||
		!strings.Contains(err.Error(), "lies inside the workspace") {
		t.Errorf(`Read("c.json") inside the workspace "." = %v, want it refused`, err)
	}
}

func TestReadForeignOwner(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a file to another user (chown)")
	}
	p := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(p, []byte("name: p\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 4321, 4321); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(p, Options{MaxBytes: 100, OperatorOwned: true}); err == nil || !strings.Contains(err.Error(), "owned by uid 4321") {
		t.Errorf("Read(file of uid 4321) = %v, want it refused naming the owner", err)
	}
	if _, err := Read(p, Options{MaxBytes: 100}); err != nil {
		t.Errorf("Read(file of uid 4321) without operator checks = %v, want the file", err)
	}
}
