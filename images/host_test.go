package images

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestHostPasswdCases(t *testing.T) {
	tests := []struct {
		uid, gid      uint32
		passwd, group string
	}{
		{
			1000, 1000,
			"root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			"root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n",
		},
		{
			0, 0,
			"root:x:0:0:root:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			"root:x:0:\nnogroup:x:65534:\n",
		},
		{
			65534, 65534,
			"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/tmp:/bin/sh\n",
			"root:x:0:\nnogroup:x:65534:\n",
		},
		{
			1234, 0,
			"root:x:0:0:root:/root:/bin/sh\nsandbox:x:1234:0:sandbox:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			"root:x:0:\nnogroup:x:65534:\n",
		},
	}
	state := t.TempDir()
	for _, tt := range tests {
		img, err := Host(state, tt.uid, tt.gid)
		if err != nil {
			t.Fatalf("Host(%d:%d) = %v", tt.uid, tt.gid, err)
		}
		etc := img.Binds[0]
		if etc.Target != "/etc" {
			t.Fatalf("Host(%d:%d).Binds[0] = %+v, want the generated /etc first", tt.uid, tt.gid, etc)
		}
		if want := filepath.Join(state, "host", "etc-"+itoa(tt.uid)+"-"+itoa(tt.gid)); etc.Source != want {
			t.Errorf("Host(%d:%d) /etc source = %s, want %s", tt.uid, tt.gid, etc.Source, want)
		}
		for file, want := range map[string]string{"passwd": tt.passwd, "group": tt.group} {
			got, err := os.ReadFile(filepath.Join(etc.Source, file))
			if err != nil || string(got) != want {
				t.Errorf("Host(%d:%d) /etc/%s = %q, %v, want %q", tt.uid, tt.gid, file, got, err, want)
			}
		}
		if got, _ := os.ReadFile(filepath.Join(etc.Source, "hosts")); !strings.Contains(string(got), "127.0.0.1\tlocalhost") || !strings.Contains(string(got), "::1") {
			t.Errorf("Host(%d:%d) /etc/hosts = %q, want localhost for 127.0.0.1 and ::1", tt.uid, tt.gid, got)
		}
		if got, _ := os.ReadFile(filepath.Join(etc.Source, "nsswitch.conf")); !strings.Contains(string(got), "passwd: files\n") {
			t.Errorf("Host(%d:%d) /etc/nsswitch.conf = %q, want files only", tt.uid, tt.gid, got)
		}
	}
}

func itoa(n uint32) string { return strconv.FormatUint(uint64(n), 10) }

func TestHostNeverExposesSecrets(t *testing.T) {
	img, err := Host(t.TempDir(), 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !img.Host || img.Name != HostName || img.Rootfs != "" {
		t.Errorf("Host() = name %q host %v rootfs %q, want host, true, empty", img.Name, img.Host, img.Rootfs)
	}
	if !slices.Contains(img.Env, "HOME=/tmp") || !slices.Contains(img.Env, "PATH="+DefaultPath) {
		t.Errorf("Host().Env = %q, want HOME=/tmp and the default PATH", img.Env)
	}
	secret := []string{"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/sudoers.d", "/root", "/home", "/etc/ssl/private"}
	under := func(p, s string) bool { return p == s || strings.HasPrefix(p, s+"/") }
	for _, b := range img.Binds {
		for _, s := range secret {
			if under(b.Target, s) || (b.Target != "/etc" && under(b.Source, s)) {
				t.Errorf("Host() binds %s at %s, which exposes %s", b.Source, b.Target, s)
			}
		}
	}
	for target := range img.Symlinks {
		for _, s := range secret {
			if under(target, s) {
				t.Errorf("Host() makes symbolic link %s, which touches %s", target, s)
			}
		}
	}
	etc := img.Binds[0].Source
	for _, f := range []string{"shadow", "gshadow", "sudoers", "sudoers.d", "ssl/private"} {
		if _, err := os.Lstat(filepath.Join(etc, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("generated /etc has %s (%v), want none", f, err)
		}
	}
	// Every bind below /etc lands on a mount point of the generated /etc.
	for _, b := range img.Binds[1:] {
		if !strings.HasPrefix(b.Target, "/etc/") {
			continue
		}
		mp, err := os.Lstat(filepath.Join(etc, strings.TrimPrefix(b.Target, "/etc/")))
		src, serr := os.Stat(b.Source)
		if err != nil || serr != nil || mp.IsDir() != src.IsDir() {
			t.Errorf("mount point for %s: %v, %v; want one of the source's kind", b.Target, err, serr)
		}
	}
}

// fakeHost builds a small host file system: merged /usr (bin, lib and
// sbin are links), a real /lib64, an /etc with secrets and an /etc/ssl
// with a private directory.
func fakeHost(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	dirs := []string{"usr/bin", "usr/lib", "usr/sbin", "usr/share/zoneinfo/Europe", "lib64", "etc/ssl/certs", "etc/ssl/private", "etc/alternatives", "root", "home/alice"}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{
		"usr/share/zoneinfo/Europe/Berlin": "TZif",
		"etc/ssl/openssl.cnf":              "[openssl]\n",
		"etc/ssl/private/key.pem":          "PRIVATE",
		"etc/ld.so.cache":                  "cache",
		"etc/shadow":                       "root:!:1::::::\n",
		"etc/sudoers":                      "root ALL=(ALL) ALL\n",
		"root/.bashrc":                     "secret",
	}
	for p, data := range files {
		if err := os.WriteFile(filepath.Join(root, p), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"bin":                 "usr/bin",
		"lib":                 "usr/lib",
		"sbin":                "usr/sbin",
		"etc/localtime":       "../usr/share/zoneinfo/Europe/Berlin",
		"etc/ca-certificates": "../root", // a hostile link into /root: never bound
	}
	for p, text := range links {
		if err := os.Symlink(text, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestHostFakeRoot(t *testing.T) {
	host := fakeHost(t)
	state := t.TempDir()
	img, err := hostImage(host, state, 1000, 1000)
	if err != nil {
		t.Fatalf("hostImage = %v", err)
	}
	etc := filepath.Join(state, "host", "etc-1000-1000")
	want := []Bind{
		{etc, "/etc"},
		{filepath.Join(host, "usr"), "/usr"},
		{filepath.Join(host, "lib64"), "/lib64"},
		{filepath.Join(host, "etc/alternatives"), "/etc/alternatives"},
		{filepath.Join(host, "etc/ssl/certs"), "/etc/ssl/certs"},
		{filepath.Join(host, "etc/ssl/openssl.cnf"), "/etc/ssl/openssl.cnf"},
		{filepath.Join(host, "etc/ld.so.cache"), "/etc/ld.so.cache"},
		{filepath.Join(host, "usr/share/zoneinfo/Europe/Berlin"), "/etc/localtime"},
	}
	if !slices.Equal(img.Binds, want) {
		t.Errorf("hostImage().Binds =\n%v\nwant\n%v", img.Binds, want)
	}
	wantLinks := map[string]string{"/bin": "usr/bin", "/lib": "usr/lib", "/sbin": "usr/sbin"}
	if len(img.Symlinks) != len(wantLinks) {
		t.Errorf("hostImage().Symlinks = %v, want %v", img.Symlinks, wantLinks)
	}
	for k, v := range wantLinks {
		if img.Symlinks[k] != v {
			t.Errorf("hostImage().Symlinks[%q] = %q, want %q", k, img.Symlinks[k], v)
		}
	}

	var got []string
	err = filepath.WalkDir(etc, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(etc, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		got = append(got, rel+" "+fi.Mode().String())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantTree := []string{
		". drwxr-xr-x", "alternatives drwxr-xr-x", "group -rw-r--r--", "hosts -rw-r--r--",
		"ld.so.cache -rw-r--r--", "localtime -rw-r--r--", "nsswitch.conf -rw-r--r--", "passwd -rw-r--r--",
		"ssl drwxr-xr-x", "ssl/certs drwxr-xr-x", "ssl/openssl.cnf -rw-r--r--",
	}
	if !slices.Equal(got, wantTree) {
		t.Errorf("generated /etc =\n%q\nwant\n%q", got, wantTree)
	}
	if fi, err := os.Stat(filepath.Join(state, "host")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("state host directory mode = %v, %v, want 0700", fi.Mode(), err)
	}
}

func TestHostCache(t *testing.T) {
	host := fakeHost(t)
	state := t.TempDir()
	first, err := hostImage(host, state, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	etc := first.Binds[0].Source
	inode := func() uint64 {
		fi, err := os.Stat(etc)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	before := inode()
	if _, err := hostImage(host, state, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if after := inode(); after != before {
		t.Errorf("second hostImage rebuilt the cached /etc (inode %d -> %d), want it reused", before, after)
	}

	// A tampered cache is rebuilt.
	if err := os.WriteFile(filepath.Join(etc, "passwd"), []byte("root::0:0::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := hostImage(host, state, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(etc, "passwd")); !strings.Contains(string(data), "sandbox:x:1000:1000:") {
		t.Errorf("passwd after tampering = %q, want it regenerated", data)
	}
	// A new host file needs a new mount point: the cache follows.
	if err := os.WriteFile(filepath.Join(host, "etc/ssl/extra.cnf"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	img, err := hostImage(host, state, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(etc, "ssl/extra.cnf")); err != nil || !slices.Contains(img.Binds, Bind{filepath.Join(host, "etc/ssl/extra.cnf"), "/etc/ssl/extra.cnf"}) {
		t.Errorf("after adding /etc/ssl/extra.cnf: mount point %v, binds %v; want both", err, img.Binds)
	}
	entries, err := os.ReadDir(filepath.Join(state, "host"))
	if err != nil || len(entries) != 1 {
		t.Errorf("state host directory holds %d entries (%v), want only the cached /etc", len(entries), err)
	}
}

func TestHostEmptyStateDir(t *testing.T) {
	if _, err := Host("", 0, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Host(\"\") = %v, want ErrInvalid", err)
	}
}

// BenchmarkHostCached measures Host when its /etc is already cached, the
// steady state of a backend that asks for the host image on every call.
func BenchmarkHostCached(b *testing.B) {
	state := b.TempDir()
	if _, err := Host(state, 1000, 1000); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := Host(state, 1000, 1000); err != nil {
			b.Fatal(err)
		}
	}
}
