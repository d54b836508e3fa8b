//go:build integration

package integration

import (
	"cmp"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExecMountUnderRoots: exec --mount adds a bind mount only below the
// policy's mountRoots. On runc and crun the call reads a read-only mount
// and writes a read-write one (the host sees the file), cannot write the
// read-only one; a read-write mount under a read-only root, a source
// outside every root, a link leading out of a root and a source holding
// or inside the dsh home are refused naming --mount, exit 2, before
// anything runs.
func TestExecMountUnderRoots(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	base := filepath.Dir(e.home)
	ref, out := filepath.Join(base, "roots", "ref"), filepath.Join(base, "roots", "out")
	for _, d := range []string{ref, out} {
		if err := os.MkdirAll(d, 0o777); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(ref, "hello.txt"), []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", filepath.Join(ref, "escape")); err != nil {
		t.Fatal(err)
	}
	pol := filepath.Join(t.TempDir(), "mounts.yaml")
	doc := "name: mounts\nmountRoots:\n" +
		"  - {path: " + ref + ", mode: ro}\n" +
		"  - {path: " + out + ", mode: rw}\n"
	// wide's root holds the test's dsh home, sessions root and state.
	wide := filepath.Join(filepath.Dir(pol), "wide.yaml")
	if err := os.WriteFile(pol, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wide, []byte("name: wide\nmountRoots: [{path: "+base+", mode: rw}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	execPolicy := func(pol, runtime string, mounts []string, command string) result {
		args := append([]string{"exec"}, e.flags("")...)
		args = append(args, "--policy", pol, "--runtime", runtime)
		for _, m := range mounts {
			args = append(args, "--mount", m)
		}
		return run(t, nil, append(args, "--", command)...)
	}
	exec := func(runtime string, mounts []string, command string) result {
		return execPolicy(pol, runtime, mounts, command)
	}
	for _, runtime := range []string{"runc", "crun"} {
		t.Run(runtime, func(t *testing.T) {
			mounts := []string{ref + ":/ref:ro", out + ":/out"}
			r := exec(runtime, mounts, "cat /ref/hello.txt && echo "+runtime+" > /out/written && grep ' /ref ' /proc/mounts | grep -c ro,")
			if r.code != 0 || r.stdout != "from the host\n1\n" {
				t.Fatalf("exec --mount %v = %d, %q (stderr %q); want the host file and one read-only /ref", mounts, r.code, r.stdout, r.stderr)
			}
			if got, err := os.ReadFile(filepath.Join(out, "written")); err != nil || string(got) != runtime+"\n" {
				t.Errorf("the host's %s/written = %q, %v; want %q written through the read-write mount", out, got, err, runtime)
			}
			r = exec(runtime, mounts[:1], "touch /ref/new")
			if r.code == 0 {
				t.Errorf("touch in the read-only mount succeeded")
			}
			if _, err := os.Stat(filepath.Join(ref, "new")); err == nil {
				t.Errorf("a file appeared in the read-only root %s", ref)
			}
		})
	}

	marker := filepath.Join(out, "ran")
	for _, tc := range []struct {
		name, policy, mount, want string
	}{
		{"read-write under a read-only root", "", ref + ":/ref", "mountRoots " + ref + " is read-only"},
		{"outside every root", "", e.workspace + ":/w:ro", "outside the policy's mountRoots"},
		{"a link out of a root", "", filepath.Join(ref, "escape") + ":/x:ro", "symbolic link"},
		{"through a link", "", filepath.Join(ref, "escape", "ssl") + ":/x:ro", "symbolic link"},
		{"dot-dot out of a root", "", ref + "/../../..:/x:ro", "not a clean path"},
		{"holding the dsh home", wide, base + ":/b:ro", "dsh home"},
		{"inside the dsh home", wide, e.home + ":/h", "dsh home"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := execPolicy(cmp.Or(tc.policy, pol), "runc", []string{tc.mount}, "touch "+marker)
			if r.code != 2 || !strings.Contains(r.stderr, "--mount") || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exec --mount %s = %d, stderr %q; want exit 2 naming --mount and %q", tc.mount, r.code, r.stderr, tc.want)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("exec --mount %s ran the command", tc.mount)
				os.Remove(marker)
			}
		})
	}
}

// TestServeMountUnderRootsFromConfig: serve takes its policy directory
// from the --config file's serve section; a call through it (exec
// --server --mount) gets the bind mount its policy's mountRoots allow,
// and the service refuses, naming mounts, a read-write mount under a
// read-only root and a source holding its dsh home.
func TestServeMountUnderRootsFromConfig(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	base := filepath.Dir(e.home)
	ref := filepath.Join(base, "roots", "ref")
	if err := os.MkdirAll(ref, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ref, "hello.txt"), []byte("via the service\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	policies := t.TempDir()
	for name, doc := range map[string]string{
		"mounts.yaml": "name: mounts\nmountRoots: [{path: " + ref + ", mode: ro}]\n",
		"wide.yaml":   "name: wide\nmountRoots: [{path: " + base + ", mode: ro}]\n",
	} {
		if err := os.WriteFile(filepath.Join(policies, name), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(t.TempDir(), "dsh-sandbox.yaml")
	if err := os.WriteFile(cfg, []byte("serve:\n  policy-dir: "+policies+"\n  max-concurrent: 2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sv := startServe(t, e, "--config", cfg)
	remote := func(pol, mount, command string) result {
		// The CLI names the policy; the service has it from its --policy-dir.
		args := append([]string{"exec", "--server", "unix://" + sv.sock, "--policy", pol, "--mount", mount}, e.flags("s1")...)
		return run(t, nil, append(args, "--", command)...)
	}
	if r := remote("mounts", ref+":/ref:ro", "cat /ref/hello.txt"); r.code != 0 || r.stdout != "via the service\n" {
		t.Fatalf("exec --server --policy mounts --mount %s:/ref:ro = %d, %q (stderr %q); want the host file", ref, r.code, r.stdout, r.stderr)
	}
	for _, tc := range []struct{ pol, mount, want string }{
		{"mounts", ref + ":/ref", "read-only"},
		{"mounts", e.workspace + ":/w:ro", "outside the policy's mountRoots"},
		{"wide", base + ":/b:ro", "dsh home"},
	} {
		if r := remote(tc.pol, tc.mount, "true"); r.code != 2 || !strings.Contains(r.stderr, "mounts") || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("exec --server --policy %s --mount %s = %d, stderr %q; want exit 2 naming mounts and %q", tc.pol, tc.mount, r.code, r.stderr, tc.want)
		}
	}
}
