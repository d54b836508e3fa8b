//go:build integration

package integration

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The CVE regression suite: one test per published escape from a
// container runtime, each running the attack's published shape through
// dsh-sandbox on every backend (oci with runc, crun and runsc; docker;
// containerd) and asserting that it is refused or contained: the host
// is unchanged. The runtimes installed here are Debian's (runc 1.1.5,
// crun 1.8.1, runsc 20221219), some of them older than the fixes; what
// contains an attack there is dsh-sandbox's own layers (the per-call
// user namespace that never maps host root, seccomp, the read-only root,
// no-new-privileges, validation of what a caller may ask for).

// cveWorld is an environment with the test image and the malicious
// images imported into every backend, and a policy file per backend and
// image.
type cveWorld struct {
	e env
	// victim is a host directory every uid may write (0777, like a
	// shared scratch directory), with a file named ptmx: what a runtime
	// tricked by an image's /dev symlink would change.
	victim string
	// marker is a host file no call mounts; a call that reads it
	// reached the host's file system.
	marker string
	dir    string
}

// cveImages are the malicious images: the test image with one entry
// replaced by a symbolic link (name → link target).
func cveImages(victim string) map[string][2]string {
	return map[string][2]string{
		"devlink":     {"dev", victim},                                  // CVE-2026-41579
		"nulllink":    {"dev/null", "/proc/sys/kernel/core_pattern"},    // CVE-2025-31133
		"consolelink": {"dev/console", "/proc/sys/kernel/core_pattern"}, // CVE-2025-52565
		"proclink":    {"proc", "/tmp"},                                 // CVE-2025-52881
	}
}

func newCVEWorld(t *testing.T) *cveWorld {
	t.Helper()
	requireDaemons(t)
	e := newEnv(t)
	w := &cveWorld{e: e, dir: t.TempDir()}
	w.victim = filepath.Join(w.dir, "victim")
	if err := os.Mkdir(w.victim, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(w.victim, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w.victim, "ptmx"), []byte("host file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.marker = filepath.Join(w.dir, "host-marker")
	if err := os.WriteFile(w.marker, []byte("host-only\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := testImageTar(t)
	importEverywhere(t, e, base, idImage)
	for name, link := range cveImages(w.victim) {
		importEverywhere(t, e, withLink(t, base, link[0], link[1]), "dsh-itest-cve-"+name+":1")
	}
	// The host's core_pattern is what several attacks aim at: put it
	// back whatever happens.
	before, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if now, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); !bytes.Equal(now, before) {
			_ = os.WriteFile("/proc/sys/kernel/core_pattern", before, 0o644)
		}
	})
	return w
}

// withLink writes a copy of the rootfs tarball base in which name (and
// everything below it) is replaced by a symbolic link to target.
func withLink(t *testing.T, base, name, target string) string {
	t.Helper()
	in, err := os.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out := filepath.Join(t.TempDir(), strings.ReplaceAll(name, "/", "-")+".tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		clean := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(h.Name, "./"), "/"), "/")
		if clean == name || strings.HasPrefix(clean, name+"/") {
			continue
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

// policy writes the policy file of backend b with image img and returns
// its path.
func (w *cveWorld) policy(t *testing.T, b idBackend, img string) string {
	t.Helper()
	doc := map[string]any{"name": "cve-" + b.name, "backend": b.backend, "image": img, "workspace": "rw", "transcript": "none"}
	if b.runtime != "" {
		doc["runtime"] = b.runtime
	}
	data, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(w.dir, fmt.Sprintf("cve-%s-%x.json", b.name, sha256.Sum256([]byte(img))))
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// exec runs command in a call of backend b with image img, with extra
// exec flags.
func (w *cveWorld) exec(t *testing.T, b idBackend, img string, flags []string, command string) result {
	t.Helper()
	args := append(append([]string{"exec"}, w.e.flags("")...), daemonFlags()...)
	args = append(append(args, "--policy", w.policy(t, b, img)), flags...)
	return run(t, nil, append(args, "--", command)...)
}

// hostUnchanged asserts what every attack aims to change on the host:
// the victim directory holds only its ptmx, the marker and
// core_pattern are as they were.
func (w *cveWorld) hostUnchanged(t *testing.T, corePattern []byte) {
	t.Helper()
	ents, err := os.ReadDir(w.victim)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if fi, err := os.Lstat(filepath.Join(w.victim, "ptmx")); len(names) != 1 || err != nil || !fi.Mode().IsRegular() {
		t.Errorf("ESCAPE: the host directory %s now holds %v (ptmx: %v, %v), want only the file ptmx", w.victim, names, fi, err)
		// Put it back for the next backend.
		for _, n := range names {
			_ = os.Remove(filepath.Join(w.victim, n))
		}
		_ = os.WriteFile(filepath.Join(w.victim, "ptmx"), []byte("host file\n"), 0o644)
	}
	if now, _ := os.ReadFile("/proc/sys/kernel/core_pattern"); !bytes.Equal(now, corePattern) {
		t.Errorf("ESCAPE: the host's core_pattern is %q, was %q", now, corePattern)
	}
	if data, _ := os.ReadFile(w.marker); string(data) != "host-only\n" {
		t.Errorf("ESCAPE: the host marker is %q", data)
	}
}

func corePattern(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/kernel/core_pattern")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// runtimeBinaries are the host's runtime binaries a CVE-2019-5736 attack
// would overwrite.
var runtimeBinaries = []string{"runc", "crun", "runsc", "containerd-shim-runc-v2", "docker-runc"}

func hashBinaries(t *testing.T) map[string][32]byte {
	t.Helper()
	sums := map[string][32]byte{}
	for _, name := range runtimeBinaries {
		p, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		sums[p] = sha256.Sum256(data)
	}
	return sums
}

// TestCVE2019_5736ProcSelfExe: the call opens /proc/self/exe and the
// exe of every process it sees for writing, over and over while it
// runs (the runtime's own binary is what the attack overwrites when the
// runtime enters the container). Every open fails and no runtime binary
// on the host changes; the legitimate read of /proc/self/exe works.
func TestCVE2019_5736ProcSelfExe(t *testing.T) {
	w := newCVEWorld(t)
	before := hashBinaries(t)
	if len(before) == 0 {
		t.Fatal("no runtime binary found on PATH")
	}
	script := `w=0; for i in 1 2 3 4 5 6 7 8 9 10; do for p in /proc/self/exe /proc/[0-9]*/exe; do if (exec 3>>"$p") 2>/dev/null; then w=$((w+1)); fi; done; done
echo "opened-for-write=$w"
if head -c 4 /proc/self/exe | grep -q ELF; then echo read=1; else echo read=0; fi`
	for _, b := range idBackends {
		t.Run(b.name, func(t *testing.T) {
			r := w.exec(t, b, idImage, nil, script)
			if r.code != 0 {
				t.Fatalf("call = exit %d, stderr %q", r.code, r.stderr)
			}
			if !strings.Contains(r.stdout, "opened-for-write=0") {
				t.Errorf("ESCAPE SHAPE: the call opened a process's exe for writing: %q", r.stdout)
			}
			if !strings.Contains(r.stdout, "read=1") {
				t.Errorf("the legitimate read of /proc/self/exe failed: %q", r.stdout)
			}
		})
	}
	after := hashBinaries(t)
	for p, sum := range before {
		if after[p] != sum {
			t.Errorf("ESCAPE: runtime binary %s changed", p)
		}
	}
}

// TestCVE2024_21626LeakedFD: the working directory of a call is a
// leaked descriptor's /proc/self/fd/N (the attack's process.cwd), which
// is refused before anything runs; inside a call, no descriptor the call
// inherits is a directory, and cd through each /proc/self/fd/N and
// /proc/1/fd/N never reaches the host's file system (the marker stays
// unreadable). The legitimate variant: a workdir in the workspace runs.
func TestCVE2024_21626LeakedFD(t *testing.T) {
	w := newCVEWorld(t)
	cp := corePattern(t)
	up := strings.Repeat("../", 12)
	script := `n=0; for d in /proc/self/fd/* /proc/1/fd/*; do if [ -d "$d" ] && (cd "$d" 2>/dev/null && cat ` + up + strings.TrimPrefix(w.marker, "/") + ` >/dev/null 2>&1); then n=$((n+1)); echo "reached-host-through=$d"; fi; done; echo "escapes=$n"; ls -l /proc/self/fd/ | grep -c ' -> /' | sed 's/^/fds=/'`
	for _, b := range idBackends {
		t.Run(b.name, func(t *testing.T) {
			for _, fd := range []int{3, 4, 5, 6, 7, 8, 9} {
				wd := fmt.Sprintf("/proc/self/fd/%d", fd)
				r := w.exec(t, b, idImage, []string{"--workdir", wd}, "cat "+up+strings.TrimPrefix(w.marker, "/"))
				if r.code == 0 || strings.Contains(r.stdout, "host-only") {
					t.Errorf("ESCAPE SHAPE: workdir %s: exit %d, stdout %q; want refused or contained", wd, r.code, r.stdout)
				}
			}
			r := w.exec(t, b, idImage, []string{"--workdir", w.e.workspace}, script)
			if r.code != 0 {
				t.Fatalf("call = exit %d, stderr %q", r.code, r.stderr)
			}
			if !strings.Contains(r.stdout, "escapes=0") {
				t.Errorf("ESCAPE: %q", r.stdout)
			}
		})
	}
	w.hostUnchanged(t, cp)
}

// linkImageTest runs command in a call of every backend on the
// malicious image name (images' entry replaced by a link): the call is
// refused, or it runs contained; either way the host is unchanged. The
// legitimate variant: the same command on the clean image runs.
func linkImageTest(t *testing.T, name string, flags []string, command string) {
	w := newCVEWorld(t)
	cp := corePattern(t)
	for _, b := range idBackends {
		t.Run(b.name, func(t *testing.T) {
			r := w.exec(t, b, "dsh-itest-cve-"+name+":1", flags, command)
			t.Logf("malicious image %s: exit %d, stdout %q, stderr %q", name, r.code, r.stdout, r.stderr)
			w.hostUnchanged(t, cp)
			clean := w.exec(t, b, idImage, flags, "echo clean-ran")
			if clean.code != 0 || !strings.Contains(clean.stdout, "clean-ran") {
				t.Errorf("the clean image: exit %d, stdout %q, stderr %q; want it to run", clean.code, clean.stdout, clean.stderr)
			}
		})
	}
	w.hostUnchanged(t, cp)
}

// corePatternWrite tries to write core_pattern through every path the
// attacks aim at.
const corePatternWrite = `for p in /dev/null /dev/console /proc/sys/kernel/core_pattern /proc/kcore /proc/sysrq-trigger; do echo '|/bin/escaped' > "$p" 2>/dev/null && echo "wrote=$p"; done; echo done`

// TestCVE2025_31133MaskedPathDevNull: an image whose /dev/null is a
// link to /proc/sys/kernel/core_pattern (the runtime masks paths by
// bind-mounting /dev/null; a link there turns a mask into a writable
// bind of the host's procfs file).
func TestCVE2025_31133MaskedPathDevNull(t *testing.T) {
	linkImageTest(t, "nulllink", nil, corePatternWrite)
}

// TestCVE2025_52565ConsoleRace: an image whose /dev/console is a link to
// /proc/sys/kernel/core_pattern (the runtime bind-mounts the terminal's
// pty onto /dev/console). The call runs without a terminal (exec -t
// needs a terminal on the CLI's stdin); the /dev tmpfs hides the
// image's link and the call writes only its own /dev/console.
func TestCVE2025_52565ConsoleRace(t *testing.T) {
	linkImageTest(t, "consolelink", nil, corePatternWrite)
}

// TestCVE2025_52881ProcfsRedirect: an image whose /proc is a link to
// another directory (the runtime's writes to /proc/self/attr and
// /proc/sys are redirected where the image points).
func TestCVE2025_52881ProcfsRedirect(t *testing.T) {
	linkImageTest(t, "proclink", nil, corePatternWrite)
}

// TestCVE2026_41579DevSymlink: an image whose /dev is a link to a host
// directory every uid may write, holding a file named ptmx (a runtime
// that follows it removes ptmx there and creates fd, stdin, stdout,
// stderr and core links).
func TestCVE2026_41579DevSymlink(t *testing.T) {
	linkImageTest(t, "devlink", nil, "ls -la /dev/; echo done")
}

// TestCVEDoctor: doctor --json lists, for each OCI runtime and for
// containerd's runc, the runtime's version and one passing self-test per
// CVE of this suite.
func TestCVEDoctor(t *testing.T) {
	requireDaemons(t)
	e := newEnv(t)
	r := run(t, nil, append(append([]string{"doctor", "--json"}, e.flags("")...), daemonFlags()...)...)
	var reports []doctorReport
	if err := json.Unmarshal([]byte(r.stdout), &reports); err != nil {
		t.Fatalf("doctor --json: %v (exit %d, stdout %q, stderr %q)", err, r.code, r.stdout, r.stderr)
	}
	cves := []string{"CVE-2019-5736", "CVE-2024-21626", "CVE-2025-31133", "CVE-2025-52565", "CVE-2025-52881", "CVE-2026-41579"}
	seen := map[string]bool{}
	for _, rep := range reports {
		if rep.Backend != "oci" && rep.Backend != "containerd" {
			continue
		}
		name := rep.Backend + "/" + rep.Runtime
		got := map[string]bool{}
		version := false
		for _, c := range rep.Checks {
			got[c.Name] = c.OK
			if (c.Name == "version" || c.Name == "runtime") && c.OK && strings.Contains(c.Detail, "version") {
				version = true
			}
		}
		if !version {
			t.Errorf("%s: doctor names no runtime version", name)
		}
		for _, cve := range cves {
			if ok, listed := got[cve]; !listed || !ok {
				t.Errorf("%s: %s listed %v, ok %v; want a passing self-test", name, cve, listed, ok)
			}
		}
		seen[name] = true
	}
	for _, want := range []string{"oci/runc", "oci/crun", "oci/runsc", "containerd/"} {
		if !seen[want] {
			t.Errorf("doctor --json has no entry %s (saw %v)", want, seen)
		}
	}
}

// doctorReport is one entry of `doctor --json`.
type doctorReport struct {
	Backend string `json:"backend"`
	Runtime string `json:"runtime"`
	Checks  []struct {
		Name   string `json:"name"`
		OK     bool   `json:"ok"`
		Detail string `json:"detail"`
	} `json:"checks"`
}
