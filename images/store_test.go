package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// requireBusybox returns the busybox-static binary, skipping the test when
// it is missing (failing under CI=true, where it must be installed).
func requireBusybox(t testing.TB) string {
	t.Helper()
	if _, err := os.Stat(DefaultBusyboxPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("busybox-static is required in CI: %v", err)
		}
		t.Skipf("busybox-static not installed (%v); apt-get install busybox-static", err)
	}
	return DefaultBusyboxPath
}

func busyboxTar(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := BusyboxRootfsTar(&buf, requireBusybox(t)); err != nil {
		t.Fatalf("BusyboxRootfsTar = %v", err)
	}
	return buf.Bytes()
}

func writeFile(t testing.TB, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "input.tar")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func gzipped(t testing.TB, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func openStore(t testing.TB) *Store {
	t.Helper()
	s, err := OpenStore(filepath.Join(t.TempDir(), "images"))
	if err != nil {
		t.Fatalf("OpenStore = %v", err)
	}
	return s
}

// checkBusybox checks the unpacked busybox root filesystem.
func checkBusybox(t *testing.T, img *Image) {
	t.Helper()
	want, err := os.ReadFile(DefaultBusyboxPath)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(img.Rootfs, "bin/busybox"))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("rootfs bin/busybox: %d bytes, %v; want the %d bytes of %s", len(got), err, len(want), DefaultBusyboxPath)
	}
	if fi, err := os.Stat(filepath.Join(img.Rootfs, "bin/busybox")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("rootfs bin/busybox mode = %v, %v, want 0755", fi.Mode(), err)
	}
	for _, applet := range []string{"sh", "env", "cat", "ls", "id", "sleep", "echo"} {
		if got, err := os.Readlink(filepath.Join(img.Rootfs, "bin", applet)); err != nil || got != "busybox" {
			t.Errorf("readlink(bin/%s) = %q, %v, want %q", applet, got, err, "busybox")
		}
	}
	if fi, err := os.Stat(filepath.Join(img.Rootfs, "tmp")); err != nil || fi.Mode()&fs.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("rootfs tmp = %v, %v, want mode 1777", fi, err)
	}
	if data, err := os.ReadFile(filepath.Join(img.Rootfs, "etc/passwd")); err != nil || !strings.HasPrefix(string(data), "root:x:0:0:") {
		t.Errorf("rootfs etc/passwd = %q, %v, want a root entry", data, err)
	}
	if img.Size < int64(len(want)) {
		t.Errorf("image size = %d, want at least %d", img.Size, len(want))
	}
}

func TestImportRootfs(t *testing.T) {
	data := busyboxTar(t)
	for _, compressed := range []bool{false, true} {
		input := data
		if compressed {
			input = gzipped(t, data)
		}
		file := writeFile(t, input)
		s := openStore(t)
		var calls [][2]int64
		img, err := s.Import(context.Background(), file, "busybox", func(done, total int64) {
			calls = append(calls, [2]int64{done, total})
		})
		if err != nil {
			t.Fatalf("Import(rootfs, gzip=%v) = %v", compressed, err)
		}
		if img.Name != "busybox:latest" || img.Host || img.Binds != nil {
			t.Errorf("Import(rootfs) = %+v, want name busybox:latest, not host, no binds", img)
		}
		checkBusybox(t, img)
		if !slices.Equal(img.Env, []string{"PATH=" + DefaultPath}) {
			t.Errorf("Import(rootfs).Env = %q, want only the default PATH", img.Env)
		}
		sum := sha256.Sum256(input)
		if want := "sha256:" + hex.EncodeToString(sum[:]); img.Digest != want {
			t.Errorf("Import(rootfs).Digest = %s, want %s", img.Digest, want)
		}
		if img.Imported.IsZero() {
			t.Errorf("Import(rootfs).Imported is zero")
		}
		if len(calls) == 0 {
			t.Fatalf("progress was never called")
		}
		for i, c := range calls {
			if c[1] != int64(len(input)) || (i > 0 && c[0] < calls[i-1][0]) {
				t.Fatalf("progress call %d = %v, want non-decreasing done and total %d", i, c, len(input))
			}
		}
		if last := calls[len(calls)-1]; last[0] != int64(len(input)) {
			t.Errorf("last progress = %v, want done = %d", last, len(input))
		}
		for _, d := range []string{s.Root(), filepath.Join(s.Root(), "busybox"), filepath.Join(s.Root(), "busybox", "latest")} {
			if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
				t.Errorf("store directory %s mode = %v, %v, want 0700", d, fi.Mode(), err)
			}
		}
		if fi, err := os.Stat(filepath.Join(s.Root(), "busybox", "latest", recordFile)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("image record mode = %v, %v, want 0600", fi.Mode(), err)
		}
		checkNoLeftovers(t, s)
	}
}

// checkNoLeftovers fails when the store's temporary directory is not empty.
func checkNoLeftovers(t *testing.T, s *Store) {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.Root(), tmpDir))
	if err != nil || len(entries) != 0 {
		t.Errorf("store temporary directory holds %d entries (%v), want none", len(entries), err)
	}
}

// busyboxImage builds a two-layer image: the busybox root filesystem,
// then a layer that whites out bin/yes, makes /opt opaque and adds
// etc/motd.
func busyboxImage(t *testing.T, env []string, created time.Time) v1.Image {
	t.Helper()
	base := busyboxTar(t)
	lower, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(base)), nil })
	if err != nil {
		t.Fatal(err)
	}
	optLayer := makeTar(t, dir("opt/"), reg("opt/old", "lower"))
	opt, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(optLayer)), nil })
	if err != nil {
		t.Fatal(err)
	}
	upperTar := makeTar(t, reg("bin/.wh.yes", ""), reg("opt/.wh..wh..opq", ""), reg("opt/new", "upper"), reg("etc/motd", "hello\n"))
	upper, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(upperTar)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, lower, opt, upper)
	if err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.Config(img, v1.Config{Env: env, Cmd: []string{"/bin/sh"}}); err != nil {
		t.Fatal(err)
	}
	if img, err = mutate.CreatedAt(img, v1.Time{Time: created}); err != nil {
		t.Fatal(err)
	}
	return img
}

func checkLayers(t *testing.T, img *Image) {
	t.Helper()
	checkBusybox(t, img)
	if _, err := os.Lstat(filepath.Join(img.Rootfs, "bin/yes")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("bin/yes after its whiteout: %v, want absent", err)
	}
	if _, err := os.Lstat(filepath.Join(img.Rootfs, "opt/old")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("opt/old under an opaque directory: %v, want absent", err)
	}
	for p, want := range map[string]string{"etc/motd": "hello\n", "opt/new": "upper"} {
		if got, err := os.ReadFile(filepath.Join(img.Rootfs, p)); err != nil || string(got) != want {
			t.Errorf("rootfs %s = %q, %v, want %q", p, got, err, want)
		}
	}
}

func TestImportDockerArchive(t *testing.T) {
	created := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	img := busyboxImage(t, []string{"PATH=/bin:/usr/bin", "GREETING=docker"}, created)
	tag, err := name.NewTag("busybox:test")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := tarball.Write(tag, img, &buf); err != nil {
		t.Fatal(err)
	}
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	for _, compressed := range []bool{false, true} {
		input := buf.Bytes()
		if compressed {
			input = gzipped(t, input)
		}
		s := openStore(t)
		got, err := s.Import(context.Background(), writeFile(t, input), "bb:docker", nil)
		if err != nil {
			t.Fatalf("Import(docker-archive, gzip=%v) = %v", compressed, err)
		}
		checkLayers(t, got)
		if got.Name != "bb:docker" || !slices.Equal(got.Env, []string{"PATH=/bin:/usr/bin", "GREETING=docker"}) {
			t.Errorf("Import(docker-archive) = name %q env %q, want bb:docker with the config env", got.Name, got.Env)
		}
		if !got.Created.Equal(created) {
			t.Errorf("Import(docker-archive).Created = %v, want %v", got.Created, created)
		}
		if got.Digest != digest.String() {
			t.Errorf("Import(docker-archive).Digest = %s, want %s", got.Digest, digest)
		}
		checkNoLeftovers(t, s)
	}
}

// tarDir tars the directory dir (symbolic links kept as links).
func tarDir(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(data)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ociLayout writes an OCI layout holding a foreign-architecture image
// first and then img for linux on this architecture.
func ociLayout(t *testing.T, img v1.Image) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	foreignArch := "s390x"
	if runtime.GOARCH == foreignArch {
		foreignArch = "riscv64"
	}
	foreign, err := mutate.Config(empty.Image, v1.Config{Env: []string{"GREETING=foreign"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(foreign, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: foreignArch})); err != nil {
		t.Fatal(err)
	}
	if err := p.AppendImage(img, layout.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestImportOCILayout(t *testing.T) {
	created := time.Date(2023, 1, 2, 3, 4, 5, 0, time.UTC)
	img := busyboxImage(t, []string{"GREETING=oci"}, created)
	digest, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	data := tarDir(t, ociLayout(t, img))
	for _, compressed := range []bool{false, true} {
		input := data
		if compressed {
			input = gzipped(t, data)
		}
		s := openStore(t)
		got, err := s.Import(context.Background(), writeFile(t, input), "bb:oci", nil)
		if err != nil {
			t.Fatalf("Import(oci-layout, gzip=%v) = %v", compressed, err)
		}
		checkLayers(t, got)
		if want := []string{"PATH=" + DefaultPath, "GREETING=oci"}; !slices.Equal(got.Env, want) {
			t.Errorf("Import(oci-layout).Env = %q, want %q", got.Env, want)
		}
		if got.Digest != digest.String() || !got.Created.Equal(created) {
			t.Errorf("Import(oci-layout) digest %s created %v, want %s %v", got.Digest, got.Created, digest, created)
		}
		checkNoLeftovers(t, s)
	}
}

func TestImportOCILayoutRefusesSymlinks(t *testing.T) {
	img := busyboxImage(t, nil, time.Unix(0, 0))
	dir := ociLayout(t, img)
	if err := os.Symlink("/etc/hostname", filepath.Join(dir, "blobs", "sha256", "extra")); err != nil {
		t.Fatal(err)
	}
	s := openStore(t)
	_, err := s.Import(context.Background(), writeFile(t, tarDir(t, dir)), "bb:oci", nil)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "blobs/sha256/extra") {
		t.Errorf("Import(OCI layout with a symbolic link) = %v, want an ErrInvalid naming the link", err)
	}
	checkNoLeftovers(t, s)
}

func TestImportHostileCases(t *testing.T) {
	tests := []struct {
		name string
		data []byte
	}{
		{"dotdot", makeTar(t, dir("bin/"), reg("../x", "y"))},
		{"absolute", makeTar(t, reg("/etc/passwd", "root::0:0::/:/bin/sh\n"))},
		{"symlink-through", makeTar(t, symlink("evil", "/etc/shadow"), reg("evil/x", "y"))},
		{"hardlink-outside", makeTar(t, hardlink("hl", "../../../../etc/passwd"))},
		{"char-device", makeTar(t, entry{typ: tar.TypeChar, name: "dev/null", mode: 0o666})},
		{"fifo", makeTar(t, entry{typ: tar.TypeFifo, name: "fifo", mode: 0o644})},
		{"empty", makeTar(t)},
		{"garbage", bytes.Repeat([]byte("not a tarball "), 100)},
		{"zstd", append([]byte{0x28, 0xb5, 0x2f, 0xfd}, make([]byte, 100)...)},
	}
	for _, tt := range tests {
		s := openStore(t)
		img, err := s.Import(context.Background(), writeFile(t, tt.data), "hostile", nil)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Import(%s) = %v, %v, want an error wrapping ErrInvalid", tt.name, img, err)
		}
		if list, err := s.List(); err != nil || len(list) != 0 {
			t.Errorf("after Import(%s), List = %v, %v, want empty", tt.name, list, err)
		}
		checkNoLeftovers(t, s)
	}
}

func TestImportNameCases(t *testing.T) {
	file := writeFile(t, makeTar(t, reg("x", "y")))
	s := openStore(t)
	for _, n := range []string{"host", "host:latest", "Bad", "", "a//b", "../x", "x@sha256:" + strings.Repeat("0", 64)} {
		if _, err := s.Import(context.Background(), file, n, nil); !errors.Is(err, ErrInvalid) {
			t.Errorf("Import(name %q) = %v, want an error wrapping ErrInvalid", n, err)
		}
	}
	if _, err := s.Import(context.Background(), filepath.Join(t.TempDir(), "missing.tar"), "x", nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Import(missing file) = %v, want an error wrapping fs.ErrNotExist", err)
	}
}

func TestImportCanceled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := openStore(t)
	_, err := s.Import(ctx, writeFile(t, makeTar(t, reg("x", "y"))), "x", nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Import(canceled) = %v, want context.Canceled", err)
	}
	if _, err := s.Get("x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get after a canceled import = %v, want ErrNotFound", err)
	}
	checkNoLeftovers(t, s)
}

func TestStoreGetListRemove(t *testing.T) {
	s := openStore(t)
	if _, err := s.Get("missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
	if _, err := s.Get("host"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Get(host) = %v, want ErrInvalid", err)
	}
	ctx := context.Background()
	v1File := writeFile(t, makeTar(t, reg("version", "1")))
	v2File := writeFile(t, makeTar(t, reg("version", "2")))
	for _, n := range []string{"zeta", "alpha:1", "alpha:2"} {
		if _, err := s.Import(ctx, v1File, n, nil); err != nil {
			t.Fatalf("Import(%q) = %v", n, err)
		}
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, img := range list {
		names = append(names, img.Name)
	}
	if want := []string{"alpha:1", "alpha:2", "zeta:latest"}; !slices.Equal(names, want) {
		t.Errorf("List = %q, want %q", names, want)
	}

	// Replacing keeps one image of the name, with the new content.
	if _, err := s.Import(ctx, v2File, "zeta:latest", nil); err != nil {
		t.Fatal(err)
	}
	img, err := s.Get("zeta")
	if err != nil {
		t.Fatal(err)
	}
	if data, err := os.ReadFile(filepath.Join(img.Rootfs, "version")); err != nil || string(data) != "2" {
		t.Errorf("after re-import, version = %q, %v, want %q", data, err, "2")
	}
	checkNoLeftovers(t, s)

	if err := s.Remove("alpha:1"); err != nil {
		t.Fatalf("Remove(alpha:1) = %v", err)
	}
	if _, err := s.Get("alpha:1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(alpha:1) after Remove = %v, want ErrNotFound", err)
	}
	if err := s.Remove("alpha:1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Remove(alpha:1) twice = %v, want ErrNotFound", err)
	}
	if _, err := s.Get("alpha:2"); err != nil {
		t.Errorf("Get(alpha:2) after removing alpha:1 = %v", err)
	}
	checkNoLeftovers(t, s)

	// A second Store on the same root sees the same images.
	again, err := OpenStore(s.Root())
	if err != nil {
		t.Fatal(err)
	}
	if list, err := again.List(); err != nil || len(list) != 2 {
		t.Errorf("List on a reopened store = %v, %v, want 2 images", list, err)
	}
}

func TestOpenStoreRemovesStaleTemp(t *testing.T) {
	s := openStore(t)
	stale := filepath.Join(s.Root(), tmpDir, "import-stale")
	fresh := filepath.Join(s.Root(), tmpDir, "import-fresh")
	for _, d := range []string{stale, fresh} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * staleTemp)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenStore(s.Root()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale temporary entry after OpenStore: %v, want removed", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh temporary entry after OpenStore: %v, want kept", err)
	}
}

func TestBusyboxRootfsTarMissingBinary(t *testing.T) {
	err := BusyboxRootfsTar(io.Discard, filepath.Join(t.TempDir(), "busybox"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("BusyboxRootfsTar(missing) = %v, want an error wrapping fs.ErrNotExist", err)
	}
}

func BenchmarkImportRootfs(b *testing.B) {
	file := writeFile(b, busyboxTar(b))
	s := openStore(b)
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Import(context.Background(), file, "bench", nil); err != nil {
			b.Fatal(err)
		}
	}
}

// TestAddHostBinariesBash imports busybox plus the host's bash and checks
// that bash and the libraries it needs are in the stored root filesystem.
func TestAddHostBinariesBash(t *testing.T) {
	var base, full bytes.Buffer
	if err := BusyboxRootfsTar(&base, requireBusybox(t)); err != nil {
		t.Fatalf("BusyboxRootfsTar = %v", err)
	}
	if err := AddHostBinaries(&full, &base, "bash"); err != nil {
		t.Fatalf("AddHostBinaries(bash) = %v", err)
	}
	file := filepath.Join(t.TempDir(), "rootfs.tar")
	if err := os.WriteFile(file, full.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	img, err := st.Import(t.Context(), file, "withbash:1", nil)
	if err != nil {
		t.Fatalf("Import = %v", err)
	}
	for _, p := range []string{"bin/bash", "bin/busybox", "bin/sh"} {
		if _, err := os.Lstat(filepath.Join(img.Rootfs, p)); err != nil {
			t.Errorf("stored rootfs lacks %s: %v", p, err)
		}
	}
	libs, _ := filepath.Glob(filepath.Join(img.Rootfs, "lib*", "*", "libc.so*"))
	libs64, _ := filepath.Glob(filepath.Join(img.Rootfs, "lib*", "libc.so*"))
	if len(libs)+len(libs64) == 0 {
		t.Errorf("stored rootfs has no libc for bash")
	}
}

// TestAddHostBinariesRefusesPaths checks that a name with a slash is
// refused.
func TestAddHostBinariesRefusesPaths(t *testing.T) {
	if err := AddHostBinaries(io.Discard, bytes.NewReader(nil), "/bin/bash"); err == nil {
		t.Errorf("AddHostBinaries(%q) = nil, want an error", "/bin/bash")
	}
}

// TestWriteRootfsTarRoundTrip exports an imported busybox image and
// imports the export again: the same files, links and modes come back.
func TestWriteRootfsTarRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	if err := BusyboxRootfsTar(&buf, requireBusybox(t)); err != nil {
		t.Fatalf("BusyboxRootfsTar = %v", err)
	}
	dir := t.TempDir()
	first := filepath.Join(dir, "first.tar")
	if err := os.WriteFile(first, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := OpenStore(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := st.Import(t.Context(), first, "a:1", nil)
	if err != nil {
		t.Fatalf("Import(first) = %v", err)
	}
	var out bytes.Buffer
	var last int64
	if err := WriteRootfsTar(t.Context(), &out, a, func(done int64) { last = done }); err != nil {
		t.Fatalf("WriteRootfsTar = %v", err)
	}
	if last != a.Size {
		t.Errorf("WriteRootfsTar progress ended at %d, want the image size %d", last, a.Size)
	}
	second := filepath.Join(dir, "second.tar")
	if err := os.WriteFile(second, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := st.Import(t.Context(), second, "b:1", nil)
	if err != nil {
		t.Fatalf("Import(export) = %v", err)
	}
	list := func(root string) map[string]string {
		m := map[string]string{}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			fi, _ := d.Info()
			rel, _ := filepath.Rel(root, p)
			desc := fi.Mode().String()
			if fi.Mode()&fs.ModeSymlink != 0 {
				l, _ := os.Readlink(p)
				desc += " -> " + l
			} else if fi.Mode().IsRegular() {
				desc += fmt.Sprintf(" %d", fi.Size())
			}
			m[rel] = desc
			return nil
		})
		return m
	}
	la, lb := list(a.Rootfs), list(b.Rootfs)
	if len(la) < 10 {
		t.Fatalf("first import has only %d entries", len(la))
	}
	for k, v := range la {
		if lb[k] != v {
			t.Errorf("after the round trip %s = %q, want %q", k, lb[k], v)
		}
	}
	if len(lb) != len(la) {
		t.Errorf("round trip has %d entries, want %d", len(lb), len(la))
	}
	host := &Image{Name: HostName, Host: true}
	if err := WriteRootfsTar(t.Context(), io.Discard, host, nil); err == nil {
		t.Errorf("WriteRootfsTar(host) = nil, want an error")
	}
}
