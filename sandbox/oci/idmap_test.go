package oci

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestIdmapMount stages an id-mapped mount of a root-owned directory:
// through it the directory's files are owned by the mapped uid, on disk
// they stay root's; a source reached through a symbolic link is refused.
func TestIdmapMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skipf("id-mapped mounts need root (this test runs as uid %d)", os.Geteuid())
	}
	m, err := policy.CallIDMapping(0, 0)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := newUserNamespace(m.UIDs, m.GIDs)
	if err != nil {
		t.Fatalf("newUserNamespace = %v", err)
	}
	defer ns.Close()
	base := t.TempDir()
	src := filepath.Join(base, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(base, "staged")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := idmapMount(src, target, int(ns.Fd())); err != nil {
		t.Fatalf("idmapMount = %v", err)
	}
	defer unix.Unmount(target, unix.MNT_DETACH)
	if uid := ownerOf(t, filepath.Join(target, "f")); uid != policy.MappedIDBase {
		t.Errorf("through the mount f is owned by %d, want %d", uid, policy.MappedIDBase)
	}
	if uid := ownerOf(t, filepath.Join(src, "f")); uid != 0 {
		t.Errorf("on disk f is owned by %d, want 0", uid)
	}
	if err := unix.Unmount(target, 0); err != nil {
		t.Fatalf("unmount: %v", err)
	}

	link := filepath.Join(base, "link")
	if err := os.Symlink(src, link); err != nil {
		t.Fatal(err)
	}
	if err := idmapMount(link, target, int(ns.Fd())); err == nil {
		unix.Unmount(target, unix.MNT_DETACH)
		t.Errorf("idmapMount through a symbolic link = nil, want refused")
	}

	// A file is staged on an empty file.
	fileTarget := filepath.Join(base, "staged-file")
	if err := os.WriteFile(fileTarget, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := idmapMount(filepath.Join(src, "f"), fileTarget, int(ns.Fd())); err != nil {
		t.Fatalf("idmapMount(file) = %v", err)
	}
	defer unix.Unmount(fileTarget, unix.MNT_DETACH)
	if uid := ownerOf(t, fileTarget); uid != policy.MappedIDBase {
		t.Errorf("the staged file is owned by %d, want %d", uid, policy.MappedIDBase)
	}
}

func ownerOf(t *testing.T, p string) uint32 {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid
}

// BenchmarkUserNamespace times whole calls of `true` in one workspace
// per variant, interleaved in one run: user host-root (no user
// namespace), a uid-1000 workspace (a user namespace, uid 1000 mapped
// 1:1) and a root-owned workspace (a user namespace plus id-mapped
// staging mounts of the workspace and session directory). Run it with
// -benchtime=30x or more; it reports the median of each variant.
func BenchmarkUserNamespace(b *testing.B) {
	for _, rt := range []string{RuntimeRunc, RuntimeCrun} {
		b.Run(rt, func(b *testing.B) {
			e := newTestExecutor(b, rt)
			type variant struct {
				name string
				req  *sandbox.Request
				ds   []time.Duration
			}
			mk := func(name, user string, owner int) *variant {
				ws := filepath.Join(b.TempDir(), "ws")
				if err := os.Mkdir(ws, 0o755); err != nil {
					b.Fatal(err)
				}
				if err := os.Chown(ws, owner, owner); err != nil {
					b.Fatal(err)
				}
				p := testPolicy(b, rt)
				p.User = user
				tr := filepath.Join(b.TempDir(), "sessions", "s")
				return &variant{name: name, req: &sandbox.Request{Command: "true", Policy: p,
					Session: sandbox.Session{ID: "s", Cwd: ws, TranscriptDir: tr}}}
			}
			vs := []*variant{mk("host-root", policy.UserHostRoot, 0), mk("userns", "auto", 1000), mk("userns-idmap", "auto", 0)}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, v := range vs {
					t := time.Now()
					res, err := e.Run(context.Background(), v.req)
					v.ds = append(v.ds, time.Since(t))
					if err != nil || sandbox.ExitCode(res, nil) != 0 {
						b.Fatalf("%s: Run(true) = %+v, %v", v.name, res, err)
					}
				}
			}
			b.StopTimer()
			for _, v := range vs {
				ds := v.ds
				slices.Sort(ds)
				b.ReportMetric(float64(ds[len(ds)/2])/float64(time.Millisecond), v.name+"-median-ms")
			}
		})
	}
}

// TestSearchable refuses a state directory below a directory others may
// not search, naming it, and accepts it once that directory is 0711.
func TestSearchable(t *testing.T) {
	base := t.TempDir()
	closed := filepath.Join(base, "closed")
	state := filepath.Join(closed, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	if err := searchable(state); err == nil || !strings.Contains(err.Error(), closed+" ") {
		t.Errorf("searchable(%s) = %v, want an error naming %s", state, err, closed)
	}
	if err := os.Chmod(closed, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := searchable(state); err != nil {
		t.Errorf("searchable(%s) = %v, want nil", state, err)
	}
}
