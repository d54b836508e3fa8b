//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// imageBackends are the backends with images.
var imageBackends = []string{"oci", "docker", "containerd"}

// imagesArgs is "images SUB" with the env's and the daemons' flags.
func imagesArgs(e env, sub, backend string, more ...string) []string {
	args := append(append([]string{"images", sub}, e.flags("")...), daemonFlags()...)
	return append(append(args, "--backend", backend), more...)
}

// uniqueSuffix keeps the image names of this run apart from other runs
// sharing the Docker engine.
func uniqueSuffix() string {
	return fmt.Sprintf("%d%d", os.Getpid(), time.Now().UnixNano()%1_000_000)
}

// TestImagesNamesSameOnEveryBackend builds an image with busybox and the
// host's jq in one command (images build) and imports it under a short
// name, a name with a namespace and one with a registry and port into
// every backend. Each backend reports the canonical name ("NAME:latest"
// for the short one), runs a call by any spelling of it ("x", "x:latest",
// "docker.io/library/x"), and removes it by any spelling with images rm
// --json; a second removal is exit 125 (not found). Hostile and digest
// names are refused with exit 2 naming --name, before anything is
// imported.
func TestImagesNamesSameOnEveryBackend(t *testing.T) {
	requireDaemons(t)
	e := newEnv(t)
	suffix := uniqueSuffix()
	short := "dsh-itest-bb" + suffix
	names := []struct{ name, canonical string }{
		{short, short + ":latest"},
		{"dsh-itest/tools" + suffix + ":1", "dsh-itest/tools" + suffix + ":1"},
		{"registry.example:5000/dsh-itest/tools" + suffix + ":2", "registry.example:5000/dsh-itest/tools" + suffix + ":2"},
	}
	for _, b := range imageBackends {
		built := map[string]string{} // name: the digest build printed
		for _, n := range names {
			r := run(t, nil, imagesArgs(e, "build", b, "--name", n.name, "--add", "jq", "--json")...)
			if r.code != 0 {
				t.Fatalf("images build --backend %s --name %s exited %d: %s", b, n.name, r.code, r.stderr)
			}
			var img struct {
				Backend, Name, Digest string
			}
			if err := json.Unmarshal([]byte(r.stdout), &img); err != nil || img.Backend != b || img.Name != n.canonical || img.Digest == "" {
				t.Errorf("images build --backend %s --name %s --json printed %q (%v), want name %q and a digest", b, n.name, r.stdout, err, n.canonical)
			}
			built[img.Name] = img.Digest
			t.Cleanup(func() { run(t, nil, imagesArgs(e, "rm", b, n.canonical)...) })
		}
		r := run(t, nil, imagesArgs(e, "list", b, "--json")...)
		var listed []struct{ Name, Digest string }
		if err := json.Unmarshal([]byte(r.stdout), &listed); err != nil {
			t.Fatalf("images list --backend %s --json = %q: %v", b, r.stdout, err)
		}
		for _, n := range names {
			found := false
			for _, l := range listed {
				if l.Name == n.canonical {
					found = true
					if l.Digest != built[n.canonical] {
						t.Errorf("images list --backend %s shows %s with digest %s, images build printed %s", b, l.Name, l.Digest, built[n.canonical])
					}
				}
			}
			if !found {
				t.Errorf("images list --backend %s --json = %q, want it to list %q", b, r.stdout, n.canonical)
			}
		}
		for _, spelling := range []string{short, short + ":latest", "docker.io/library/" + short, names[1].name, "docker.io/" + names[1].name, names[2].name} {
			args := append(append([]string{"exec"}, e.flags("s1")...), daemonFlags()...)
			r := run(t, nil, append(args, "--backend", b, "--image", spelling, "--", "jq -n 1+1")...)
			if r.code != 0 || r.stdout != "2\n" {
				t.Errorf("exec --backend %s --image %s -- 'jq -n 1+1' = %d, %q (stderr %q); want 0 and \"2\\n\"", b, spelling, r.code, r.stdout, r.stderr)
			}
		}
		for i, spelling := range []string{short, "docker.io/" + names[1].name, names[2].name} {
			r := run(t, nil, imagesArgs(e, "rm", b, "--json", spelling)...)
			var out struct {
				Backend, Name string
				Removed       bool
			}
			if err := json.Unmarshal([]byte(r.stdout), &out); r.code != 0 || err != nil || out.Backend != b || out.Name != names[i].canonical || !out.Removed {
				t.Errorf("images rm --backend %s --json %s = %d, %q (%v, stderr %q); want it removed as %q", b, spelling, r.code, r.stdout, err, r.stderr, names[i].canonical)
			}
			if r := run(t, nil, imagesArgs(e, "rm", b, spelling)...); r.code != 125 {
				t.Errorf("images rm --backend %s %s twice exited %d, want 125 (not found): %s", b, spelling, r.code, r.stderr)
			}
		}
		r = run(t, nil, imagesArgs(e, "list", b, "--json")...)
		if strings.Contains(r.stdout, suffix) {
			t.Errorf("images list --backend %s --json after images rm = %q, want none of this test's images", b, r.stdout)
		}
	}

	tar := testImageTar(t)
	for _, bad := range []string{"Bad", "../x", "a//b", "x;id", "x@sha256:" + strings.Repeat("0", 64), "host", "-x"} {
		for _, b := range imageBackends {
			r := run(t, nil, imagesArgs(e, "import", b, "--name", bad, tar)...)
			if r.code != 2 || !strings.Contains(r.stderr, "--name") {
				t.Errorf("images import --backend %s --name %q exited %d, stderr %q; want 2 naming --name", b, bad, r.code, r.stderr)
			}
		}
	}
	if r := run(t, nil, imagesArgs(e, "build", "oci", "--name", short, "--add", "/usr/bin/jq")...); r.code != 2 || !strings.Contains(r.stderr, "--add") {
		t.Errorf("images build --add /usr/bin/jq exited %d, stderr %q; want 2 naming --add (a command name, not a path)", r.code, r.stderr)
	}
}

// TestImagesRemoveRefusesImageInUse starts a call on each backend that
// waits for a file, and removes its image meanwhile: images rm is
// refused with exit 125 saying the image is in use, and the call still
// completes; once the call has ended the same removal succeeds.
func TestImagesRemoveRefusesImageInUse(t *testing.T) {
	requireDaemons(t)
	e := newEnv(t)
	name := "dsh-itest-inuse" + uniqueSuffix() + ":1"
	tar := testImageTar(t)
	for _, b := range imageBackends {
		if r := run(t, nil, imagesArgs(e, "import", b, "--name", name, tar)...); r.code != 0 {
			t.Fatalf("images import --backend %s exited %d: %s", b, r.code, r.stderr)
		}
		t.Cleanup(func() { run(t, nil, imagesArgs(e, "rm", b, name)...) })

		started, release := filepath.Join(e.workspace, "started-"+b), filepath.Join(e.workspace, "release-"+b)
		args := append(append([]string{"exec"}, e.flags("s1")...), daemonFlags()...)
		cmd := exec.Command(binary, append(args, "--backend", b, "--image", name, "--timeout", "120s", "--",
			"touch started-"+b+"; while [ ! -e release-"+b+" ]; do sleep 0.1; done; echo done")...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		waitFor := func(what string, done func() bool) {
			t.Helper()
			for deadline := time.Now().Add(60 * time.Second); !done(); time.Sleep(50 * time.Millisecond) {
				if time.Now().After(deadline) {
					_ = os.WriteFile(release, nil, 0o644)
					t.Fatalf("--backend %s: %s did not happen within 60s (stderr %q)", b, what, stderr.String())
				}
			}
		}
		waitFor("the call start", func() bool { _, err := os.Stat(started); return err == nil })

		r := run(t, nil, imagesArgs(e, "rm", b, name)...)
		if r.code != 125 || !strings.Contains(r.stderr, "in use") {
			t.Errorf("images rm --backend %s %s while a call runs in it exited %d, stderr %q; want 125 saying it is in use", b, name, r.code, r.stderr)
		}
		if err := os.WriteFile(release, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := <-exited; err != nil || stdout.String() != "done\n" {
			t.Errorf("exec --backend %s after the refused removal = %v, %q (stderr %q); want exit 0 and \"done\\n\"", b, err, stdout.String(), stderr.String())
		}
		if r := run(t, nil, imagesArgs(e, "rm", b, name)...); r.code != 0 {
			t.Errorf("images rm --backend %s %s after the call ended exited %d: %s", b, name, r.code, r.stderr)
		}
	}
}

// TestImagesRemoveLeavesForeignImages tags an image in the Docker engine
// that dsh-sandbox did not import: images rm --backend docker refuses it
// (exit 2, naming the missing owner label) and the engine still has it.
func TestImagesRemoveLeavesForeignImages(t *testing.T) {
	requireDaemons(t)
	e := newEnv(t)
	name := "dsh-itest-foreign" + uniqueSuffix() + ":1"
	imp := exec.Command("docker", "import", testImageTar(t), name)
	if out, err := imp.CombinedOutput(); err != nil {
		t.Fatalf("docker import: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rmi", name).Run() })
	r := run(t, nil, imagesArgs(e, "rm", "docker", name)...)
	if r.code != 2 || !strings.Contains(r.stderr, reap.LabelOwner) {
		t.Errorf("images rm --backend docker %s (not imported by dsh-sandbox) exited %d, stderr %q; want 2 naming the label %s", name, r.code, r.stderr, reap.LabelOwner)
	}
	if out, err := exec.Command("docker", "image", "inspect", "--format", "{{.Id}}", name).CombinedOutput(); err != nil {
		t.Errorf("docker image inspect %s after the refused images rm: %v: %s; want the image kept", name, err, out)
	}
}
