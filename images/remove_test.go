package images

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestStoreNamesWithRegistryAndNamespace imports images whose names have
// a namespace and a registry with a port: each is found by every
// spelling of its name, listed by its canonical name, stored in one
// directory per repository, and removed by any spelling.
func TestStoreNamesWithRegistryAndNamespace(t *testing.T) {
	s := openStore(t)
	ctx := context.Background()
	file := writeFile(t, makeTar(t, reg("version", "1")))
	for _, tc := range []struct {
		name, canonical string
		spellings       []string
	}{
		{"myorg/tools:1", "myorg/tools:1", []string{"docker.io/myorg/tools:1"}},
		{"registry.example:5000/myorg/tools:1", "registry.example:5000/myorg/tools:1", nil},
		{"bb2", "bb2:latest", []string{"bb2:latest", "docker.io/library/bb2", "library/bb2:latest"}},
	} {
		img, err := s.Import(ctx, file, tc.name, nil)
		if err != nil {
			t.Fatalf("Import(%q) = %v", tc.name, err)
		}
		if img.Name != tc.canonical {
			t.Errorf("Import(%q).Name = %q, want %q", tc.name, img.Name, tc.canonical)
		}
		if strings.Contains(img.Rootfs, ":") {
			t.Errorf("Import(%q).Rootfs = %q, want no ':' (an overlay lower directory cannot hold one)", tc.name, img.Rootfs)
		}
		if rel, err := filepath.Rel(s.Root(), img.Rootfs); err != nil || strings.Count(rel, "/") != 2 {
			t.Errorf("Import(%q).Rootfs = %q, want <root>/<repository>/<tag>/rootfs", tc.name, img.Rootfs)
		}
		for _, n := range append(tc.spellings, tc.name) {
			if got, err := s.Get(n); err != nil || got.Name != tc.canonical {
				t.Errorf("Get(%q) = %+v, %v, want image %q", n, got, err, tc.canonical)
			}
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
	if want := []string{"bb2:latest", "myorg/tools:1", "registry.example:5000/myorg/tools:1"}; !slices.Equal(names, want) {
		t.Errorf("List = %q, want %q", names, want)
	}
	// "myorg:tools" is another image than "myorg/tools:1".
	if _, err := s.Get("myorg:tools"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(myorg:tools) = %v, want ErrNotFound", err)
	}
	if err := s.Remove("docker.io/myorg/tools:1"); err != nil {
		t.Errorf("Remove(docker.io/myorg/tools:1) = %v", err)
	}
	if _, err := s.Get("myorg/tools:1"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(myorg/tools:1) after Remove = %v, want ErrNotFound", err)
	}
	for _, n := range []string{"registry.example:5000/myorg/tools:1", "bb2"} {
		if err := s.Remove(n); err != nil {
			t.Errorf("Remove(%q) = %v", n, err)
		}
	}
	if entries, _ := os.ReadDir(s.Root()); len(entries) != 1 {
		t.Errorf("store root after removing every image holds %d entries, want only %s", len(entries), tmpDir)
	}
	checkNoLeftovers(t, s)
}

// TestStoreRemoveRefusesMountedImage mounts an overlay over a stored
// image, as a running call of the oci backend does: Remove refuses it,
// naming the image, and removes it once the mount is gone; another
// image is removed meanwhile.
func TestStoreRemoveRefusesMountedImage(t *testing.T) {
	if os.Geteuid() != 0 {
		msg := "mounting an overlay needs root"
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but " + msg)
		}
		t.Skip(msg)
	}
	s := openStore(t)
	ctx := context.Background()
	file := writeFile(t, makeTar(t, reg("version", "1")))
	img, err := s.Import(ctx, file, "inuse:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(ctx, file, "idle:1", nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	upper, work, root := filepath.Join(dir, "upper"), filepath.Join(dir, "work"), filepath.Join(dir, "root")
	for _, d := range []string{upper, work, root} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	opts := "lowerdir=" + img.Rootfs + ",upperdir=" + upper + ",workdir=" + work
	// The overlay lives in a private mount namespace of its own, held by
	// a child process: a mount namespace another process on the host
	// makes meanwhile (a container starting) copies the mounts of its
	// parent's namespace, and a copy of an overlay mounted in ours would
	// outlive its unmount here.
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -t overlay -o "$1" overlay "$2" && echo mounted && exec sleep 600`, "sh", opts, root)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	mounted := true
	unmount := func() {
		if mounted {
			mounted = false
			_ = holder.Process.Kill()
			_ = holder.Wait()
		}
	}
	defer unmount()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "mounted\n" {
		t.Fatalf("mount overlay in a namespace of its own: %q, %v", line, err)
	}
	err = s.Remove("inuse:1")
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), `"inuse:1"`) {
		t.Errorf("Remove(inuse:1) while mounted = %v, want an error wrapping ErrInUse naming it", err)
	}
	if _, err := s.Get("inuse:1"); err != nil {
		t.Errorf("Get(inuse:1) after a refused Remove = %v", err)
	}
	if err := s.Remove("idle:1"); err != nil {
		t.Errorf("Remove(idle:1) while another image is mounted = %v", err)
	}
	unmount()
	if err := s.Remove("inuse:1"); err != nil {
		t.Errorf("Remove(inuse:1) once unmounted = %v", err)
	}
	checkNoLeftovers(t, s)
}
