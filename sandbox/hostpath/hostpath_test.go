package hostpath

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// bothResolvers runs f with openat2 and with the fallback walk.
func bothResolvers(t *testing.T, f func(t *testing.T)) {
	t.Run("openat2", f)
	t.Run("walk", func(t *testing.T) {
		tryOpenat2 = false
		defer func() { tryOpenat2 = true }()
		f(t)
	})
}

func TestResolveDir(t *testing.T) {
	base := fixtures.PathTree(t)
	ws := filepath.Join(base, "ws")
	tests := []struct {
		name    string
		path    string
		want    string // "" = an ErrInvalid error
		mention string
		missing bool
	}{
		{"workspace", ws, ws, "", false},
		{"trailing slash", ws + "/", ws, "", false},
		{"dot", ws + "/./sub", filepath.Join(ws, "sub"), "", false},
		{"dot-dot of a real dir", ws + "/sub/..", ws, "", false},
		{"root", "/", "/", "", false},
		{"link to / as last component", ws + "/link-root", "", "symbolic link", false},
		{"link to / in the middle", ws + "/link-root/etc", "", "symbolic link", false},
		{"link then dot-dot", ws + "/link-sub/..", "", "symbolic link", false},
		{"link to / then dot-dot", ws + "/link-root/..", "", "symbolic link", false},
		{"link as first own component", base + "/linkdir/sub", "", "symbolic link", false},
		{"relative link to a real dir", ws + "/link-sub", "", "symbolic link", false},
		{"dangling link", ws + "/dangling", "", "symbolic link", false},
		{"file", ws + "/file", "", "not a directory", false},
		{"below a file", ws + "/file/x", "", "not a directory", false},
		{"missing", ws + "/missing", "", "does not exist", true},
		{"missing below missing", ws + "/missing/x", "", "does not exist", true},
		{"relative", "ws", "", "not an absolute path", false},
		{"empty", "", "", "is empty", false},
		{"NUL", ws + "\x00", "", "NUL", false},
	}
	bothResolvers(t, func(t *testing.T) {
		for _, tt := range tests {
			got, err := ResolveDir("session.cwd", tt.path)
			if tt.want != "" {
				if err != nil || got != tt.want {
					t.Errorf("ResolveDir(%s: %q) = %q, %v, want %q", tt.name, tt.path, got, err, tt.want)
				}
				continue
			}
			if !errors.Is(err, sandbox.ErrInvalid) {
				t.Errorf("ResolveDir(%s: %q) = %q, %v, want an error wrapping ErrInvalid", tt.name, tt.path, got, err)
				continue
			}
			if msg := err.Error(); !strings.Contains(msg, "session.cwd") || !strings.Contains(msg, tt.mention) {
				t.Errorf("ResolveDir(%s) error %q does not name session.cwd and %q", tt.name, msg, tt.mention)
			}
			if errors.Is(err, fs.ErrNotExist) != tt.missing {
				t.Errorf("ResolveDir(%s) error %v: errors.Is(fs.ErrNotExist) = %v, want %v", tt.name, err, !tt.missing, tt.missing)
			}
		}
	})
}

func TestResolvePath(t *testing.T) {
	base := fixtures.PathTree(t)
	ws := filepath.Join(base, "ws")
	bothResolvers(t, func(t *testing.T) {
		if got, err := ResolvePath("policy.mounts[0].source", ws+"/file"); err != nil || got != ws+"/file" {
			t.Errorf("ResolvePath(file) = %q, %v, want %q", got, err, ws+"/file")
		}
		for _, p := range []string{ws + "/link-root", ws + "/dangling", base + "/linkdir/file"} {
			if _, err := ResolvePath("policy.mounts[0].source", p); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "policy.mounts[0].source") {
				t.Errorf("ResolvePath(%q) error = %v, want ErrInvalid naming the field", p, err)
			}
		}
	})
}

func TestSystemDir(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"/", true}, {"/etc", true}, {"/etc/ssl", true}, {"/proc", true}, {"/proc/1/root", true},
		{"/sys/fs/cgroup", true}, {"/dev", true}, {"/dev/shm", true}, {"/usr", true}, {"/usr/bin", true},
		{"/boot/efi", true}, {"/root", true}, {"/run", true}, {"/var/run", true}, {"/bin", true},
		{"/sbin", true}, {"/lib", true}, {"/lib64", true}, {"/lib/x86_64-linux-gnu", true},
		{"/var/lib", true}, {"/var", true}, {"/home", true},
		{"/etc/../tmp", true}, // not clean: refused
		{"relative", true},
		{"/home/u/proj", false}, {"/srv/proj", false}, {"/tmp/x", false}, {"/root/proj", false},
		{"/var/lib/jenkins/workspace", false}, {"/run/user/1000/x", false}, {"/library", true},
		{"/etcetera", false}, {"/procfs", false}, {"/opt/proj", false},
	}
	for _, tt := range tests {
		if got := SystemDir(tt.path); got != tt.want {
			t.Errorf("SystemDir(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
}

func TestWithin(t *testing.T) {
	tests := []struct {
		path, root string
		want       bool
	}{
		{"/ws", "/ws", true}, {"/ws/a", "/ws", true}, {"/ws/a/b", "/ws/", true}, {"/ws2", "/ws", false},
		{"/w", "/ws", false}, {"/", "/ws", false}, {"/anything", "/", true}, {"/ws/../etc", "/ws", false},
		{"ws/a", "ws", false}, {"/ws", "", false},
	}
	for _, tt := range tests {
		if got := Within(tt.path, tt.root); got != tt.want {
			t.Errorf("Within(%q, %q) = %v, want %v", tt.path, tt.root, got, tt.want)
		}
	}
}

func TestMkdirNoFollow(t *testing.T) {
	base := fixtures.PathTree(t)
	ws := filepath.Join(base, "ws")
	// The legitimate variant: missing parents are created, mode 0700.
	target := filepath.Join(base, "sessions", "proj", "s1", "spill")
	d, err := MkdirNoFollow("session.transcriptDir", target, 0o700)
	if err != nil {
		t.Fatalf("MkdirNoFollow(%q) = %v", target, err)
	}
	f, err := CreateNoFollow(d, "call-1.stdout", 0o600)
	if err != nil {
		t.Fatalf("CreateNoFollow = %v", err)
	}
	f.Close()
	if _, err := CreateNoFollow(d, "call-1.stdout", 0o600); !errors.Is(err, fs.ErrExist) {
		t.Errorf("CreateNoFollow of an existing file = %v, want EEXIST", err)
	}
	d.Close()
	if fi, err := os.Stat(filepath.Join(target, "call-1.stdout")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("spill file: %v, %v; want mode 0600", fi, err)
	}
	if fi, err := os.Stat(target); err != nil || !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("created dir: %v, %v; want a directory without group or other access", fi, err)
	}
	// An existing directory is fine too.
	if d, err := MkdirNoFollow("session.transcriptDir", target, 0o700); err != nil {
		t.Errorf("MkdirNoFollow(existing) = %v", err)
	} else {
		d.Close()
	}

	// A link at each position is refused and nothing is created where it
	// points.
	for _, tt := range []struct{ name, path string }{
		{"link is the dir", ws + "/link-sub"},
		{"link is the parent", ws + "/link-sub/new"},
		{"link to / in the middle", ws + "/link-root/tmp/dsh-pwned"},
		{"link higher up", base + "/linkdir/sub/new"},
		{"dangling link", ws + "/dangling/new"},
		{"file in the chain", ws + "/file/new"},
		{"dot-dot", ws + "/sub/../new"},
		{"relative", "ws/new"},
	} {
		d, err := MkdirNoFollow("session.transcriptDir", tt.path, 0o700)
		if err == nil {
			d.Close()
			t.Errorf("MkdirNoFollow(%s: %q) succeeded, want an error", tt.name, tt.path)
			continue
		}
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "session.transcriptDir") {
			t.Errorf("MkdirNoFollow(%s) error = %v, want ErrInvalid naming the field", tt.name, err)
		}
	}
	for _, p := range []string{ws + "/sub/new", base + "/missing", "/tmp/dsh-pwned", ws + "/new"} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s exists: a refused MkdirNoFollow created it", p)
		}
	}
	// A planted link named like the spill file is not followed.
	d, err = OpenDirNoFollow("spill", target)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	victim := filepath.Join(base, "victim")
	if err := os.Symlink(victim, filepath.Join(target, "call-2.stdout")); err != nil {
		t.Fatal(err)
	}
	if _, err := CreateNoFollow(d, "call-2.stdout", 0o600); err == nil {
		t.Errorf("CreateNoFollow over a planted link succeeded")
	}
	if _, err := os.Lstat(victim); err == nil {
		t.Errorf("CreateNoFollow created the link's target %s", victim)
	}
	if _, err := CreateNoFollow(d, "../escape", 0o600); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("CreateNoFollow(../escape) = %v, want ErrInvalid", err)
	}
}

func TestCheckDeployment(t *testing.T) {
	base := fixtures.PathTree(t)
	ws := filepath.Join(base, "ws")
	tests := []struct {
		name      string
		protected map[string]string
		mention   string // "" = allowed
	}{
		{"outside", map[string]string{"sessions root": base + "/home/sessions", "state dir": "/run/dsh-sandbox"}, ""},
		{"sibling prefix", map[string]string{"dsh home": ws + "2/.dsh"}, ""},
		{"empty skipped", map[string]string{"dsh home": ""}, ""},
		{"sessions root inside", map[string]string{"sessions root": ws + "/.dsh/sessions"}, ws + "/.dsh/sessions"},
		{"home is the workspace", map[string]string{"dsh home": ws}, "dsh home"},
		{"workspace inside state dir", map[string]string{"state dir": base}, "state dir"},
		{"through a link", map[string]string{"dsh home": base + "/linkdir/.dsh"}, ws + "/.dsh"},
		{"relative", map[string]string{"dsh home": ".dsh"}, "not an absolute path"},
	}
	for _, tt := range tests {
		err := CheckDeployment(ws, tt.protected)
		if tt.mention == "" {
			if err != nil {
				t.Errorf("CheckDeployment(%s) = %v, want nil", tt.name, err)
			}
			continue
		}
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tt.mention) {
			t.Errorf("CheckDeployment(%s) = %v, want ErrInvalid naming %q", tt.name, err, tt.mention)
		}
		if err != nil && tt.mention != "not an absolute path" && !strings.Contains(err.Error(), ws) {
			t.Errorf("CheckDeployment(%s) = %v, want the workspace named too", tt.name, err)
		}
	}
}
