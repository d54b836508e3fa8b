package oci

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// busyboxStore returns a store holding a busybox image named "busybox".
func busyboxStore(t *testing.T) *images.Store {
	t.Helper()
	if _, err := os.Stat(images.DefaultBusyboxPath); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but busybox-static is missing: %v", err)
		}
		t.Skipf("busybox-static is not installed: %v", err)
	}
	tarball := filepath.Join(t.TempDir(), "busybox.tar")
	f, err := os.Create(tarball)
	if err != nil {
		t.Fatal(err)
	}
	if err := images.BusyboxRootfsTar(f, images.DefaultBusyboxPath); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	store, err := images.OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Import(context.Background(), tarball, "busybox", nil); err != nil {
		t.Fatal(err)
	}
	return store
}

// treeNames lists every path below root.
func treeNames(t *testing.T, root string) []string {
	t.Helper()
	var names []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		names = append(names, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestStoredImageOverlay runs calls in a stored busybox image: /bin/sh
// runs the command (there is no bash), the image's rootfs never changes
// (mount points land in the per-call overlay), and the overlay is gone
// afterwards, also when the call fails after the overlay was mounted.
func TestStoredImageOverlay(t *testing.T) {
	store := busyboxStore(t)
	img, err := store.Get("busybox")
	if err != nil {
		t.Fatal(err)
	}
	before := treeNames(t, img.Rootfs)
	for _, rt := range runtimes {
		t.Run(rt, func(t *testing.T) {
			requireRuntime(t, rt)
			e, err := New(Options{Runtime: rt, Service: driver.Service{StateDir: testStateDir(t), Logger: testLogger(t)}, Images: store})
			if err != nil {
				t.Fatal(err)
			}
			defer e.Close()
			p := testPolicy(t, rt)
			p.Image = "busybox"
			ws := t.TempDir()
			req := &sandbox.Request{
				Command: "echo hi from $0; cat /proc/1/cmdline | tr '\\0' ' '; echo; touch /etc/x 2>/dev/null || echo ro-root; pwd",
				Session: sandbox.Session{ID: "s", Cwd: ws},
				Policy:  p,
			}
			res, err := e.Run(context.Background(), req)
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			want := "hi from /bin/sh\n"
			if !strings.HasPrefix(res.Stdout.Text, want) || !strings.Contains(res.Stdout.Text, "ro-root\n"+ws+"\n") {
				t.Errorf("stdout = %q, want %q…ro-root, %s", res.Stdout.Text, want, ws)
			}
			if res.Sandbox.Image != "busybox:latest" && res.Sandbox.Image != "busybox" {
				t.Errorf("Result.Sandbox.Image = %q, want busybox", res.Sandbox.Image)
			}

			e.inject = func(step string) error {
				if step == "config" {
					return errors.New("injected")
				}
				return nil
			}
			if _, err := e.Run(context.Background(), req); err == nil {
				t.Errorf("Run with a failure after the overlay mount = nil error")
			}
			e.inject = nil
			if left := leftovers(t, e); len(left) > 0 {
				t.Errorf("left behind: %q", left)
			}
			if after := treeNames(t, img.Rootfs); strings.Join(after, "\n") != strings.Join(before, "\n") {
				t.Errorf("the image rootfs changed: %d entries before, %d after", len(before), len(after))
			}
		})
	}
}

// TestMissingImage: an image the store lacks is ErrNotFound naming it.
func TestMissingImage(t *testing.T) {
	e := newTestExecutor(t, RuntimeRunc)
	p := testPolicy(t, RuntimeRunc)
	p.Image = "nothere:1"
	_, err := e.Run(context.Background(), &sandbox.Request{Command: "true", Policy: p})
	if !errors.Is(err, sandbox.ErrNotFound) || !strings.Contains(err.Error(), "nothere:1") {
		t.Errorf("Run with image %q = %v, want ErrNotFound naming it", p.Image, err)
	}
}

// TestPolicyForOtherBackend: a policy for another backend or runtime is
// refused as invalid, naming the field.
func TestPolicyForOtherBackend(t *testing.T) {
	e := newTestExecutor(t, RuntimeRunc)
	for _, tc := range []struct{ backend, runtime, field string }{
		{"local", "runc", "policy.backend"},
		{"oci", "crun", "policy.runtime"},
	} {
		p := testPolicy(t, RuntimeRunc)
		p.Backend, p.Runtime = sandbox.Backend(tc.backend), sandbox.Runtime(tc.runtime)
		_, err := e.Run(context.Background(), &sandbox.Request{Command: "true", Policy: p})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Run(backend %q, runtime %q) = %v, want ErrInvalid naming %s", tc.backend, tc.runtime, err, tc.field)
		}
	}
}
