package images

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// entry is one tar entry for makeTar.
type entry struct {
	typ      byte
	name     string
	linkname string
	mode     int64
	body     string
}

func reg(name, body string) entry {
	return entry{typ: tar.TypeReg, name: name, mode: 0o644, body: body}
}
func dir(name string) entry { return entry{typ: tar.TypeDir, name: name, mode: 0o755} }
func symlink(name, target string) entry {
	return entry{typ: tar.TypeSymlink, name: name, linkname: target, mode: 0o777}
}
func hardlink(name, target string) entry {
	return entry{typ: tar.TypeLink, name: name, linkname: target, mode: 0o644}
}

// makeTar builds an uncompressed tarball of entries.
func makeTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{
			Typeflag: e.typ, Name: e.name, Linkname: e.linkname, Mode: e.mode,
			ModTime: time.Date(2021, 2, 3, 4, 5, 6, 0, time.UTC), Format: tar.FormatPAX,
		}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("writing tar header %q: %v", e.name, err)
		}
		if e.typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatalf("writing tar body %q: %v", e.name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sandbox is a temporary directory with an empty root filesystem "root"
// and, beside it, "outside" holding a victim file that extraction must
// never touch.
type sandbox struct {
	base, root, outside, victim string
}

func newSandbox(t testing.TB) sandbox {
	t.Helper()
	return sandboxAt(t, t.TempDir())
}

// sandboxAt makes the sandbox in base/run, replacing an earlier one.
func sandboxAt(t testing.TB, base string) sandbox {
	t.Helper()
	base = filepath.Join(base, "run")
	if err := removeTree(base); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(base, 0o700); err != nil {
		t.Fatal(err)
	}
	s := sandbox{
		base:    base,
		root:    filepath.Join(base, "root"),
		outside: filepath.Join(base, "outside"),
		victim:  filepath.Join(base, "outside", "victim"),
	}
	for _, d := range []string{s.root, s.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(s.victim, []byte("original"), 0o644); err != nil {
		t.Fatal(err)
	}
	return s
}

// extractAll unpacks the layers in order into s.root.
func (s sandbox) extractAll(t testing.TB, maxEntries int, layers ...[]byte) error {
	t.Helper()
	return s.extractLimited(t, maxEntries, 0, layers...)
}

func (s sandbox) extractLimited(t testing.TB, maxEntries int, maxBytes int64, layers ...[]byte) error {
	t.Helper()
	root, err := os.OpenRoot(s.root)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	x := newExtractor(root)
	x.maxEntries = maxEntries
	x.maxBytes = maxBytes
	for _, l := range layers {
		if err := x.extract(context.Background(), bytes.NewReader(l)); err != nil {
			return err
		}
	}
	return x.finish()
}

// checkOutside fails when anything beside root changed: the outside
// directory must hold only the untouched victim, and base only root and
// outside.
func (s sandbox) checkOutside(t testing.TB) {
	t.Helper()
	names := func(d string) []string {
		entries, err := os.ReadDir(d)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range entries {
			out = append(out, e.Name())
		}
		sort.Strings(out)
		return out
	}
	if got := strings.Join(names(s.base), ","); got != "outside,root" {
		t.Errorf("entries beside the root filesystem = %s, want outside,root", got)
	}
	if got := strings.Join(names(s.outside), ","); got != "victim" {
		t.Errorf("entries of the outside directory = %s, want victim", got)
	}
	fi, err := os.Lstat(s.victim)
	if err != nil {
		t.Fatalf("victim: %v", err)
	}
	if data, _ := os.ReadFile(s.victim); string(data) != "original" || !fi.Mode().IsRegular() {
		t.Errorf("victim = %q (mode %v), want %q untouched", data, fi.Mode(), "original")
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Nlink != 1 {
		t.Errorf("victim link count = %d, want 1", st.Nlink)
	}
}

func TestExtractHostileCases(t *testing.T) {
	shadowBefore, shadowErr := os.Lstat("/etc/shadow")
	tests := []struct {
		name    string
		entries func(s sandbox) []entry
	}{
		{"dotdot", func(s sandbox) []entry { return []entry{reg("../outside/x", "pwned")} }},
		{"dotdot-inner", func(s sandbox) []entry { return []entry{dir("a/"), reg("a/../../outside/x", "pwned")} }},
		{"dotdot-dir", func(s sandbox) []entry { return []entry{dir("../outside/d/")} }},
		{"absolute-name", func(s sandbox) []entry { return []entry{reg("/etc/passwd", "pwned")} }},
		{"absolute-name-outside", func(s sandbox) []entry { return []entry{reg(s.victim, "pwned")} }},
		{"empty-name", func(s sandbox) []entry { return []entry{reg("", "x")} }},
		{"symlink-shadow-then-file-through", func(s sandbox) []entry {
			return []entry{symlink("evil", "/etc/shadow"), reg("evil/x", "pwned")}
		}},
		{"symlink-outside-then-file-through", func(s sandbox) []entry {
			return []entry{symlink("evil", s.outside), reg("evil/x", "pwned")}
		}},
		{"symlink-outside-then-dir-through", func(s sandbox) []entry {
			return []entry{symlink("evil", s.outside), dir("evil/sub/")}
		}},
		{"symlink-outside-then-symlink-through", func(s sandbox) []entry {
			return []entry{symlink("evil", s.outside), symlink("evil/x", "y")}
		}},
		{"symlink-outside-then-overwrite-victim-through", func(s sandbox) []entry {
			return []entry{symlink("evil", s.outside), reg("evil/victim", "pwned")}
		}},
		{"symlink-relative-escape", func(s sandbox) []entry { return []entry{symlink("evil", "../outside/victim")} }},
		{"symlink-relative-escape-deep", func(s sandbox) []entry {
			return []entry{dir("a/"), symlink("a/evil", "../b/../../outside")}
		}},
		{"hardlink-relative-outside", func(s sandbox) []entry { return []entry{hardlink("hl", "../outside/victim")} }},
		{"hardlink-absolute-host-path", func(s sandbox) []entry { return []entry{hardlink("hl", s.victim)} }},
		{"hardlink-through-symlink", func(s sandbox) []entry {
			return []entry{symlink("d", s.outside), hardlink("hl", "d/victim")}
		}},
		{"hardlink-to-directory", func(s sandbox) []entry { return []entry{dir("d/"), hardlink("hl", "d")} }},
		{"char-device", func(s sandbox) []entry { return []entry{{typ: tar.TypeChar, name: "null", mode: 0o666}} }},
		{"block-device", func(s sandbox) []entry { return []entry{{typ: tar.TypeBlock, name: "sda", mode: 0o660}} }},
		{"fifo", func(s sandbox) []entry { return []entry{{typ: tar.TypeFifo, name: "pipe", mode: 0o644}} }},
		{"whiteout-through-symlink", func(s sandbox) []entry {
			return []entry{symlink("d", s.outside), reg("d/.wh.victim", "")}
		}},
		{"opaque-through-symlink", func(s sandbox) []entry {
			return []entry{symlink("d", s.outside), reg("d/.wh..wh..opq", "")}
		}},
		{"whiteout-malformed", func(s sandbox) []entry { return []entry{reg(".wh..", "")} }},
		{"file-as-parent", func(s sandbox) []entry { return []entry{reg("f", "x"), reg("f/g", "y")} }},
		{"root-not-directory", func(s sandbox) []entry { return []entry{reg(".", "x")} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSandbox(t)
			err := s.extractAll(t, 0, makeTar(t, tt.entries(s)...))
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("extract(%s) = %v, want an error wrapping ErrInvalid", tt.name, err)
			}
			s.checkOutside(t)
		})
	}
	if shadowErr == nil {
		after, err := os.Lstat("/etc/shadow")
		if err != nil || !after.ModTime().Equal(shadowBefore.ModTime()) || after.Size() != shadowBefore.Size() || !after.Mode().IsRegular() {
			t.Errorf("/etc/shadow changed during the hostile extractions")
		}
	}
}

func TestExtractErrorNamesEntry(t *testing.T) {
	s := newSandbox(t)
	err := s.extractAll(t, 0, makeTar(t, dir("dev/"), entry{typ: tar.TypeChar, name: "dev/kmsg", mode: 0o600}))
	if err == nil || !strings.Contains(err.Error(), `"dev/kmsg"`) {
		t.Errorf("extract(char device) = %v, want an error naming %q", err, "dev/kmsg")
	}
}

func TestExtractReplacesSymlinkWithoutFollowing(t *testing.T) {
	s := newSandbox(t)
	err := s.extractAll(t, 0, makeTar(t,
		symlink("evil", s.victim), reg("evil", "mine"),
		symlink("d", s.outside), dir("d/"), reg("d/victim", "mine"),
	))
	if err != nil {
		t.Fatalf("extract = %v, want nil", err)
	}
	s.checkOutside(t)
	for _, p := range []string{"evil", "d/victim"} {
		data, err := os.ReadFile(filepath.Join(s.root, p))
		if err != nil || string(data) != "mine" {
			t.Errorf("rootfs %s = %q, %v, want %q", p, data, err, "mine")
		}
	}
	if fi, err := os.Lstat(filepath.Join(s.root, "d")); err != nil || !fi.IsDir() {
		t.Errorf("rootfs d = %v, %v, want a directory", fi, err)
	}
}

func TestExtractLinksInside(t *testing.T) {
	s := newSandbox(t)
	err := s.extractAll(t, 0, makeTar(t,
		dir("./"), dir("usr/"), dir("usr/lib/"), reg("usr/lib/libc.so", "elf"),
		symlink("lib", "usr/lib"),
		symlink("etc-shadow", "/etc/shadow"),
		symlink("usr/lib/self", "../lib/libc.so"),
		hardlink("usr/lib/libc2.so", "./usr/lib/libc.so"),
		hardlink("usr/lib/libc3.so", "/usr/lib/libc.so"),
	))
	if err != nil {
		t.Fatalf("extract = %v, want nil", err)
	}
	s.checkOutside(t)
	links := map[string]string{"lib": "usr/lib", "etc-shadow": "/etc/shadow", "usr/lib/self": "../lib/libc.so"}
	for p, want := range links {
		if got, err := os.Readlink(filepath.Join(s.root, p)); err != nil || got != want {
			t.Errorf("readlink(%q) = %q, %v, want %q", p, got, err, want)
		}
	}
	fi, err := os.Stat(filepath.Join(s.root, "usr/lib/libc.so"))
	if err != nil {
		t.Fatal(err)
	}
	if n := fi.Sys().(*syscall.Stat_t).Nlink; n != 3 {
		t.Errorf("link count of usr/lib/libc.so = %d, want 3", n)
	}
}

func TestExtractModesCases(t *testing.T) {
	s := newSandbox(t)
	err := s.extractAll(t, 0, makeTar(t,
		entry{typ: tar.TypeReg, name: "suid", mode: 0o4755, body: "x"},
		entry{typ: tar.TypeReg, name: "sgid", mode: 0o2711, body: "x"},
		entry{typ: tar.TypeDir, name: "sgid-dir/", mode: 0o2775},
		entry{typ: tar.TypeDir, name: "tmp/", mode: 0o1777},
		entry{typ: tar.TypeDir, name: "ro/", mode: 0o555},
		reg("ro/file", "inside a read-only directory"),
		entry{typ: tar.TypeReg, name: "private", mode: 0o600, body: "x"},
	))
	if err != nil {
		t.Fatalf("extract = %v, want nil", err)
	}
	tests := []struct {
		path string
		want fs.FileMode
	}{
		{"suid", 0o755},
		{"sgid", 0o711},
		{"sgid-dir", fs.ModeDir | 0o775},
		{"tmp", fs.ModeDir | fs.ModeSticky | 0o777},
		{"ro", fs.ModeDir | 0o555},
		{"private", 0o600},
	}
	for _, tt := range tests {
		fi, err := os.Lstat(filepath.Join(s.root, tt.path))
		if err != nil {
			t.Errorf("lstat(%q) = %v", tt.path, err)
			continue
		}
		if got := fi.Mode() & (fs.ModeType | fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky); got != tt.want {
			t.Errorf("mode(%q) = %v, want %v", tt.path, got, tt.want)
		}
	}
	fi, err := os.Stat(filepath.Join(s.root, "suid"))
	if err == nil && !fi.ModTime().Equal(time.Date(2021, 2, 3, 4, 5, 6, 0, time.UTC)) {
		t.Errorf("mtime(suid) = %v, want 2021-02-03T04:05:06Z", fi.ModTime())
	}
}

func TestExtractWhiteouts(t *testing.T) {
	s := newSandbox(t)
	lower := makeTar(t,
		dir("a/"), reg("a/x", "1"), reg("a/y", "1"),
		dir("b/"), reg("b/z", "1"), dir("b/sub/"), reg("b/sub/deep", "1"),
		dir("c/"), reg("c/keep", "1"),
		dir("d/"), reg("d/gone", "1"),
	)
	upper := makeTar(t,
		reg("a/.wh.x", ""),
		reg("b/new", "2"),
		reg("b/.wh..wh..opq", ""),
		reg("c/n", "2"),
		reg("c/.wh.n", ""), // same layer: must not hide c/n
		reg(".wh.d", ""),
		reg("a/.wh.missing", ""),
		reg(".wh..wh.plnk", ""),
	)
	if err := s.extractAll(t, 0, lower, upper); err != nil {
		t.Fatalf("extract = %v, want nil", err)
	}
	present := []string{"a/y", "b/new", "c/keep", "c/n"}
	absent := []string{"a/x", "b/z", "b/sub", "d", "a/.wh.x", "b/.wh..wh..opq", "c/.wh.n", ".wh.d", ".wh..wh.plnk", "a/.wh.missing"}
	for _, p := range present {
		if _, err := os.Lstat(filepath.Join(s.root, p)); err != nil {
			t.Errorf("after whiteouts, %s: %v, want present", p, err)
		}
	}
	for _, p := range absent {
		if _, err := os.Lstat(filepath.Join(s.root, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after whiteouts, %s: %v, want absent", p, err)
		}
	}
}

func TestExtractEntryLimit(t *testing.T) {
	var entries []entry
	for i := range 11 {
		entries = append(entries, dir(strings.Repeat("d", i+1)+"/"))
	}
	s := newSandbox(t)
	if err := s.extractAll(t, 10, makeTar(t, entries...)); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "more than 10 entries") {
		t.Errorf("extract(11 entries, limit 10) = %v, want an ErrInvalid naming the limit", err)
	}
	s = newSandbox(t)
	if err := s.extractAll(t, 11, makeTar(t, entries...)); err != nil {
		t.Errorf("extract(11 entries, limit 11) = %v, want nil", err)
	}
}

func TestExtractByteLimit(t *testing.T) {
	s := newSandbox(t)
	layer1 := makeTar(t, reg("a", strings.Repeat("x", 600)))
	layer2 := makeTar(t, reg("b", strings.Repeat("y", 500)))
	err := s.extractLimited(t, 0, 1000, layer1, layer2)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"b"`) {
		t.Errorf("extract(1100 bytes, limit 1000) = %v, want an ErrInvalid naming entry %q", err, "b")
	}
	if _, err := os.Lstat(filepath.Join(s.root, "b")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("entry over the limit was written: %v", err)
	}
	s = newSandbox(t)
	if err := s.extractLimited(t, 0, 1100, layer1, layer2); err != nil {
		t.Errorf("extract(1100 bytes, limit 1100) = %v, want nil", err)
	}
}

// rawHeader is a ustar header block (archive/tar's writer will not write
// the sparse records a hostile archive carries).
func rawHeader(name string, typeflag byte, size int) []byte {
	b := make([]byte, 512)
	copy(b[0:], name)
	copy(b[100:], "0000644\x00")
	copy(b[108:], "0000000\x00")
	copy(b[116:], "0000000\x00")
	copy(b[124:], fmt.Sprintf("%011o\x00", size))
	copy(b[136:], "00000000000\x00")
	b[156] = typeflag
	copy(b[257:], "ustar\x0000")
	copy(b[148:], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

func padBlock(data string) []byte {
	b := []byte(data)
	return append(b, make([]byte, (512-len(b)%512)%512)...)
}

// paxRecord formats one PAX record, whose length counts itself.
func paxRecord(key, value string) string {
	body := " " + key + "=" + value + "\n"
	n := len(body)
	for len(strconv.Itoa(n))+len(body) != n {
		n = len(strconv.Itoa(n)) + len(body)
	}
	return strconv.Itoa(n) + body
}

// sparseBomb is a tarball of one PAX sparse file "bomb" declaring 1 TiB
// of holes.
func sparseBomb() []byte {
	records := paxRecord("GNU.sparse.major", "1") + paxRecord("GNU.sparse.minor", "0") +
		paxRecord("GNU.sparse.name", "bomb") + paxRecord("GNU.sparse.realsize", "1099511627776")
	sparseMap := padBlock("1\n1099511627776\n0\n")
	var data []byte
	data = append(data, rawHeader("PaxHeaders/bomb", tar.TypeXHeader, len(records))...)
	data = append(data, padBlock(records)...)
	data = append(data, rawHeader("GNUSparseFile.0/bomb", tar.TypeReg, len(sparseMap))...)
	data = append(data, sparseMap...)
	return append(data, make([]byte, 1024)...)
}

// A PAX sparse entry declaring a terabyte of holes must be refused by the
// byte limit before anything is written.
func TestExtractSparseBomb(t *testing.T) {
	data := sparseBomb()

	hdr, err := tar.NewReader(bytes.NewReader(data)).Next()
	if err != nil || hdr.Name != "bomb" || hdr.Size != 1<<40 {
		t.Fatalf("hand-made sparse archive reads as %+v, %v; want bomb of 1 TiB", hdr, err)
	}
	s := newSandbox(t)
	err = s.extractLimited(t, 0, 1<<20, data)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"bomb"`) {
		t.Errorf("extract(sparse bomb) = %v, want an ErrInvalid naming %q", err, "bomb")
	}
	if fi, err := os.Lstat(filepath.Join(s.root, "bomb")); err == nil {
		t.Errorf("sparse bomb written with size %d, want refused", fi.Size())
	}
}

func TestExtractCorruptArchive(t *testing.T) {
	s := newSandbox(t)
	data := makeTar(t, reg("a", strings.Repeat("x", 1000)))
	if err := s.extractAll(t, 0, data[:700]); !errors.Is(err, ErrInvalid) {
		t.Errorf("extract(truncated) = %v, want an error wrapping ErrInvalid", err)
	}
	if err := s.extractAll(t, 0, bytes.Repeat([]byte{0x42}, 2048)); !errors.Is(err, ErrInvalid) {
		t.Errorf("extract(garbage) = %v, want an error wrapping ErrInvalid", err)
	}
}

func TestEntryPathCases(t *testing.T) {
	tests := []struct {
		name, want string
		ok         bool
	}{
		{"a", "a", true},
		{"./a/b/", "a/b", true},
		{"a//b/./c", "a/b/c", true},
		{"./", ".", true},
		{".", ".", true},
		{"a..b", "a..b", true},
		{"..a", "..a", true},
		{"", "", false},
		{"/a", "", false},
		{"..", "", false},
		{"a/../b", "", false},
		{"a/..", "", false},
		{"a\x00b", "", false},
	}
	for _, tt := range tests {
		got, err := entryPath(tt.name)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("entryPath(%q) = %q, %v, want %q, ok=%v", tt.name, got, err, tt.want, tt.ok)
		}
	}
}

func TestSymlinkInsideCases(t *testing.T) {
	tests := []struct {
		path, text string
		ok         bool
	}{
		{"bin/sh", "busybox", true},
		{"bin/sh", "/bin/busybox", true},
		{"etc/localtime", "/usr/share/zoneinfo/UTC", true},
		{"a/b/c", "../../x", true},
		{"a/b/c", "../../../x", false},
		{"x", "..", false},
		{"x", "../x", false},
		{"x", "a/../../x", false},
		{"x", "", false},
		{"x", "a\x00", false},
	}
	for _, tt := range tests {
		err := symlinkInside(tt.path, tt.text)
		if (err == nil) != tt.ok {
			t.Errorf("symlinkInside(%q, %q) = %v, want ok=%v", tt.path, tt.text, err, tt.ok)
		}
	}
}

func FuzzExtract(f *testing.F) {
	f.Add(makeTar(f, dir("./"), dir("a/"), reg("a/b", "c"), symlink("l", "a/b"), hardlink("h", "a/b")))
	f.Add(makeTar(f, reg("../x", "y")))
	f.Add(makeTar(f, symlink("evil", "/etc/shadow"), reg("evil/x", "y")))
	f.Add(makeTar(f, symlink("evil", ".."), reg("evil/x", "y")))
	f.Add(makeTar(f, dir("a/"), reg("a/x", "1"), reg("a/.wh.x", ""), reg("a/.wh..wh..opq", "")))
	f.Add(makeTar(f, entry{typ: tar.TypeReg, name: "s", mode: 0o6755, body: "x"}, entry{typ: tar.TypeFifo, name: "p"}))
	f.Add(sparseBomb())
	f.Add([]byte{})
	base := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		// A fixed path per worker keeps the coverage deterministic
		// (random temporary names make every input look new).
		s := sandboxAt(t, base)
		_ = s.extractLimited(t, 1000, 1<<20, data)
		s.checkOutside(t)
		err := filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(s.root, p)
			if fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				t.Errorf("%s has mode %v, want setuid and setgid stripped", rel, fi.Mode())
			}
			if fi.Mode()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
				t.Errorf("%s has mode %v, want no device, FIFO or socket", rel, fi.Mode())
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				text, err := os.Readlink(p)
				if err != nil {
					return err
				}
				if err := symlinkInside(filepath.ToSlash(rel), text); err != nil {
					t.Errorf("%s -> %s: %v", rel, text, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
