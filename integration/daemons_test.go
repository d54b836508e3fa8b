//go:build integration

package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// agentUID owns the workspace of TestDaemonBackendsMatchOCI.
const agentUID = 4321

// itestNamespace is the containerd namespace of these tests, apart from
// the backend package's and the default one.
const itestNamespace = "dsh-sandbox-itest"

// requireDaemons skips unless a Docker engine and the private containerd
// of scripts/daemons.sh answer; in CI it fails instead (scripts/test.sh
// starts both).
func requireDaemons(t *testing.T) {
	t.Helper()
	requireRoot(t)
	var missing []string
	dockerSock := strings.TrimPrefix(os.Getenv("DOCKER_HOST"), "unix://")
	if dockerSock == "" {
		dockerSock = "/var/run/docker.sock"
	}
	ctrd := os.Getenv("DSH_SANDBOX_TEST_CONTAINERD")
	if ctrd == "" {
		missing = append(missing, "DSH_SANDBOX_TEST_CONTAINERD (containerd socket)")
	}
	for _, sock := range []string{dockerSock, ctrd} {
		if sock == "" {
			continue
		}
		c, err := net.DialTimeout("unix", sock, 2*time.Second)
		if err != nil {
			missing = append(missing, sock+": "+err.Error())
			continue
		}
		c.Close()
	}
	if len(missing) == 0 {
		return
	}
	msg := "needs the daemons of scripts/daemons.sh (eval \"$(scripts/daemons.sh start)\"): " + strings.Join(missing, "; ")
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// daemonFlags point the CLI at the test daemons.
func daemonFlags() []string {
	f := []string{"--containerd-address", os.Getenv("DSH_SANDBOX_TEST_CONTAINERD"), "--containerd-namespace", itestNamespace}
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		f = append(f, "--docker-host", h)
	}
	return f
}

// testImageTar writes busybox plus the host's bash as a rootfs tarball.
func testImageTar(t *testing.T) string {
	t.Helper()
	var base bytes.Buffer
	if err := images.BusyboxRootfsTar(&base, images.DefaultBusyboxPath); err != nil {
		t.Fatalf("BusyboxRootfsTar: %v (scripts/setup.sh installs busybox-static)", err)
	}
	file := filepath.Join(t.TempDir(), "busybox-bash.tar")
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := images.AddHostBinaries(f, &base, "bash"); err != nil {
		t.Fatalf("AddHostBinaries(bash): %v", err)
	}
	return file
}

// importEverywhere imports file as name into the three backends through
// the CLI.
func importEverywhere(t *testing.T, e env, file, name string) {
	t.Helper()
	for _, b := range []string{"oci", "docker", "containerd"} {
		args := append(append([]string{"images", "import"}, e.flags("")...), daemonFlags()...)
		r := run(t, nil, append(args, "--backend", b, "--name", name, "--json", file)...)
		if r.code != 0 {
			t.Fatalf("images import --backend %s exited %d: %s", b, r.code, r.stderr)
		}
		var img struct {
			Backend string `json:"backend"`
			Name    string `json:"name"`
			Size    int64  `json:"size"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &img); err != nil || img.Backend != b || img.Name != name || img.Size == 0 {
			t.Fatalf("images import --backend %s --json printed %q (%v), want backend %q, name %q and a size", b, r.stdout, err, b, name)
		}
		list := append(append([]string{"images", "list"}, e.flags("")...), daemonFlags()...)
		r = run(t, nil, append(list, "--backend", b, "--json")...)
		type listedImage struct {
			Name string `json:"name"`
		}
		var listed []listedImage
		if err := json.Unmarshal([]byte(r.stdout), &listed); r.code != 0 || err != nil ||
			!slices.Contains(listed, listedImage{name}) {
			t.Fatalf("images list --backend %s --json = %d, %q (%v); want it to list %q", b, r.code, r.stdout, err, name)
		}
	}
}

// chownTrees gives every file under dirs to uid:uid.
func chownTrees(t *testing.T, uid int, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Lchown(p, uid, uid)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// sections splits output at lines "---".
func sections(out string) []string {
	return strings.Split(out, "---\n")
}

// engineExtras are mounts a Docker engine adds to every container that
// the policy does not ask for: the container's hostname file and the
// cgroup filesystem (read-only controllers). Nothing else may differ.
var engineExtras = []string{"/etc/hostname ", "/etc/hosts ", "/etc/resolv.conf ", "/sys/fs/cgroup"}

// identity is "uid gid groups" from the identity section, the primary
// gid left out of the supplementary groups: the Docker engine always
// lists it there too, which grants nothing more.
func identity(section string) string {
	lines := strings.Split(strings.TrimSpace(section), "\n")
	if len(lines) != 3 {
		return "unparsed: " + section
	}
	var groups []string
	for _, g := range strings.Fields(strings.TrimPrefix(lines[2], "Groups:")) {
		if g != lines[1] {
			groups = append(groups, g)
		}
	}
	return lines[0] + " " + lines[1] + " [" + strings.Join(groups, " ") + "]"
}

// TestDaemonBackendsMatchOCI runs the same call with the same session and
// policy on the oci backend and on both daemon backends, with the same
// image imported into each through the CLI, and compares what the command
// sees: its environment, its identity and its mounts.
func TestDaemonBackendsMatchOCI(t *testing.T) {
	requireDaemons(t)
	e := newEnv(t)
	name := "dsh-itest-busybox:1"
	importEverywhere(t, e, testImageTar(t), name)
	path, before := seedTranscript(t, e, "s1")
	// A workspace and transcript of an ordinary user: policy user "auto"
	// then runs the call as that user on every backend.
	chownTrees(t, agentUID, e.workspace, e.root)

	command := `env | sort; echo ---; id -u; id -g; grep '^Groups:' /proc/self/status; echo ---; ` +
		`awk '{print $5, $6}' /proc/self/mountinfo | sort; echo ---; ` +
		`cat "$DSH_SESSION_JSONL"; echo x >> "$DSH_SESSION_JSONL" 2>/dev/null && echo transcript-WRITABLE; touch ./written-by-call`
	outs := map[string][]string{}
	for _, b := range []string{"oci", "docker", "containerd"} {
		args := append(append([]string{"exec"}, e.flags("s1")...), daemonFlags()...)
		r := run(t, nil, append(args, "--backend", b, "--image", name, "--", command)...)
		if r.code != 0 {
			t.Fatalf("exec --backend %s exited %d: %s", b, r.code, r.stderr)
		}
		s := sections(r.stdout)
		if len(s) != 4 {
			t.Fatalf("exec --backend %s printed %q: want 4 sections", b, r.stdout)
		}
		if strings.Contains(s[3], "WRITABLE") || strings.TrimSpace(s[3]) != strings.TrimSpace(string(before)) {
			t.Errorf("--backend %s: transcript inside = %q, want the header line, read-only", b, s[3])
		}
		if _, err := os.Stat(filepath.Join(e.workspace, "written-by-call")); err != nil {
			t.Errorf("--backend %s: the workspace is not writable: %v", b, err)
		}
		os.Remove(filepath.Join(e.workspace, "written-by-call"))
		outs[b] = s
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Errorf("transcript changed to %q", after)
	}
	if got, want := identity(outs["oci"][1]), "4321 4321 []"; got != want {
		t.Errorf("identity on oci = %q, want %q (the workspace owner)", got, want)
	}
	for _, b := range []string{"docker", "containerd"} {
		if outs[b][0] != outs["oci"][0] {
			t.Errorf("env on %s =\n%s\nwant the oci backend's\n%s", b, outs[b][0], outs["oci"][0])
		}
		if got, want := identity(outs[b][1]), identity(outs["oci"][1]); got != want {
			t.Errorf("identity on %s = %q, want the oci backend's %q", b, got, want)
		}
	}
	// A call in a user namespace (the oci backend's) cannot make device
	// nodes, so the runtime binds the host's; its root mount carries the
	// nosuid,nodev the namespace locks; and the /dev/null it binds over
	// masked files shows that mount's flags. None of that widens a call:
	// those lines are compared by destination only (devices: dropped),
	// every other line exactly.
	devices := []string{"/dev/full ", "/dev/null ", "/dev/random ", "/dev/tty ", "/dev/urandom ", "/dev/zero "}
	masked := []string{"/proc/cmdline ", "/proc/interrupts ", "/proc/keys ", "/proc/timer_list ", "/sys/kernel/vmcoreinfo ", "/ "}
	mounts := func(s string, engine bool) []string {
		var out []string
		for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
			if engine {
				// An engine that remaps user namespaces gets every
				// bind id-mapped (docs/identity.md); the flags match.
				line = strings.Replace(line, ",idmapped", "", 1)
			}
			has := func(p string) bool { return strings.HasPrefix(line, p) }
			switch {
			case engine && slices.ContainsFunc(engineExtras, has), slices.ContainsFunc(devices, has):
				continue
			case has("/.dsh-sandbox-stub "), has("/.dsh-sandbox-lifeline "):
				// pid 1 of every call but one on a terminal, and on
				// containerd the call's lifeline FIFO (docs/pool.md).
				continue
			case slices.ContainsFunc(masked, has):
				line, _, _ = strings.Cut(line, " ")
			}
			out = append(out, line)
		}
		return out
	}
	ociMounts := mounts(outs["oci"][2], false)
	if got := mounts(outs["containerd"][2], false); !slices.Equal(got, ociMounts) {
		t.Errorf("mounts on containerd =\n%s\nwant the oci backend's\n%s", strings.Join(got, "\n"), strings.Join(ociMounts, "\n"))
	}
	// The docker backend stages every bind with the policy's flags, so
	// the mounts match but for the ones the engine always adds.
	if got := mounts(outs["docker"][2], true); !slices.Equal(got, ociMounts) {
		t.Errorf("mounts on docker (without the engine's own) =\n%s\nwant the oci backend's\n%s", strings.Join(got, "\n"), strings.Join(ociMounts, "\n"))
	}
	// The workspace and the session directory keep their exact flags on
	// every backend.
	for _, b := range []string{"oci", "docker", "containerd"} {
		m := mounts(outs[b][2], b == "docker")
		for _, want := range []string{
			strings.ReplaceAll(e.workspace, " ", "\\040") + " rw,nosuid,nodev,relatime",
			filepath.Dir(path) + " ro,nosuid,nodev,noexec,relatime",
		} {
			if !slices.Contains(m, want) {
				t.Errorf("mounts on %s lack %q:\n%s", b, want, strings.Join(m, "\n"))
			}
		}
	}
	if t.Failed() {
		t.Logf("oci output:\n%s", strings.Join(outs["oci"], "---\n"))
	}
}

// TestDaemonBackendsUnavailable checks that a daemon that does not answer
// fails the call with exit 125 and runs nothing anywhere else.
func TestDaemonBackendsUnavailable(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	marker := filepath.Join(e.workspace, "ran")
	gone := filepath.Join(t.TempDir(), "gone.sock")
	for _, tc := range []struct {
		backend string
		flags   []string
	}{
		{"docker", []string{"--docker-host", "unix://" + gone}},
		{"containerd", []string{"--containerd-address", gone}},
	} {
		start := time.Now()
		args := append(append([]string{"exec"}, e.flags("s1")...), tc.flags...)
		r := run(t, nil, append(args, "--backend", tc.backend, "--image", "busybox:1", "--", "touch "+marker)...)
		if r.code != 125 || !strings.Contains(r.stderr, "not reachable") {
			t.Errorf("exec --backend %s with its daemon gone exited %d, stderr %q; want 125 saying the daemon is not reachable", tc.backend, r.code, r.stderr)
		}
		t.Logf("%s: failed after %v", tc.backend, time.Since(start).Round(time.Millisecond))
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("exec --backend %s with its daemon gone ran the command", tc.backend)
		}
	}
}

// TestDaemonBackendsTimeoutDoctorReapBench drives the rest of the CLI on
// both daemon backends: a timed-out call (124, nothing left in the
// daemon), doctor, reap and bench.
func TestDaemonBackendsTimeoutDoctorReapBench(t *testing.T) {
	requireDaemons(t)
	e := newEnv(t)
	name := "dsh-itest-busybox:1"
	importEverywhere(t, e, testImageTar(t), name)
	sessionID := fmt.Sprintf("s-timeout-%d", time.Now().UnixNano())

	for _, b := range []string{"docker", "containerd"} {
		args := append(append([]string{"exec", "--timeout", "1s", "--json"}, e.flags(sessionID)...), daemonFlags()...)
		r := run(t, nil, append(args, "--backend", b, "--image", name, "--", "sleep 30 & sleep 30")...)
		if r.code != 124 {
			t.Errorf("exec --backend %s --timeout 1s exited %d, want 124 (stderr %q)", b, r.code, r.stderr)
		}
		var res struct {
			TimedOut bool `json:"timedOut"`
			Sandbox  struct {
				Backend string `json:"backend"`
			} `json:"sandbox"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || !res.TimedOut || res.Sandbox.Backend != b {
			t.Errorf("exec --backend %s --json printed %q (%v), want a timed-out result of that backend", b, r.stdout, err)
		}
	}
	// Nothing of that session is left in either daemon.
	label := "label=" + reap.LabelSession + "=" + sessionID
	if out, err := exec.Command("docker", "ps", "-aq", "--filter", label).CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "" {
		t.Errorf("docker ps -aq --filter %s = %q, %v; want nothing", label, out, err)
	}
	ctr := func(what string) string {
		out, err := exec.Command("ctr", "--address", os.Getenv("DSH_SANDBOX_TEST_CONTAINERD"), "-n", itestNamespace, what, "ls", "-q").CombinedOutput()
		if err != nil {
			t.Errorf("ctr %s ls: %v: %s", what, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := ctr("containers"); got != "" {
		t.Errorf("containerd containers left in %s: %q", itestNamespace, got)
	}
	if got := ctr("tasks"); got != "" {
		t.Errorf("containerd tasks left in %s: %q", itestNamespace, got)
	}

	// doctor: both daemon backends usable, with an image and a real call.
	r := run(t, nil, append(append([]string{"doctor", "--json"}, e.flags("")...), daemonFlags()...)...)
	if r.code != 0 {
		t.Fatalf("doctor exited %d: %s", r.code, r.stderr)
	}
	type doctorReport struct {
		Backend string `json:"backend"`
		Usable  bool   `json:"usable"`
	}
	var reports []doctorReport
	if err := json.Unmarshal([]byte(r.stdout), &reports); err != nil {
		t.Fatalf("doctor --json printed %q: %v", r.stdout, err)
	}
	for _, b := range []string{"docker", "containerd"} {
		i := slices.IndexFunc(reports, func(r doctorReport) bool { return r.Backend == b })
		if i < 0 || !reports[i].Usable {
			t.Errorf("doctor --json: backend %s missing or not usable: %s", b, r.stdout)
		}
	}

	// reap: each daemon backend reaps without error.
	for _, b := range []string{"docker", "containerd"} {
		r := run(t, nil, append(append([]string{"reap", "--backend", b, "--json"}, e.flags("")...), daemonFlags()...)...)
		if r.code != 0 {
			t.Errorf("reap --backend %s exited %d: %s %s", b, r.code, r.stdout, r.stderr)
		}
	}
	r = run(t, nil, append(append([]string{"reap", "--backend", "docker"}, e.flags("")...), "--docker-host", "unix://"+filepath.Join(t.TempDir(), "gone.sock"))...)
	if r.code != 125 {
		t.Errorf("reap --backend docker with the engine gone exited %d, want 125 (%s)", r.code, r.stderr)
	}

	// bench: both daemon backends against their baselines, same run.
	r = run(t, nil, append(append([]string{"bench", "--n", "2", "--stream-bytes", "0", "--json"}, e.flags("")...), daemonFlags()...)...)
	if r.code != 0 {
		t.Fatalf("bench exited %d: %s", r.code, r.stderr)
	}
	rep := parseBench(t, r.stdout)
	want := map[string]string{"docker": "docker run --rm", "containerd": "ctr run --rm", "docker run --rm": "", "ctr run --rm": ""}
	for _, row := range rep.Rows {
		base, ok := want[row.Name]
		if !ok {
			continue
		}
		delete(want, row.Name)
		if row.Error != "" || row.N != 2 || row.MedianMs <= 0 || row.Baseline != base || (base != "" && row.VsBaseline <= 0) {
			t.Errorf("bench row %+v: want 2 samples, a median, baseline %q and its ratio", row, base)
		}
		t.Logf("bench %s: median %.1f ms (× baseline %.2f)", row.Name, row.MedianMs, row.VsBaseline)
	}
	if len(want) != 0 {
		t.Errorf("bench rows missing: %v", want)
	}
	// bench removes what it created: its image is in neither daemon.
	for _, b := range []string{"docker", "containerd"} {
		r := run(t, nil, append(append([]string{"images", "list", "--backend", b, "--json"}, e.flags("")...), daemonFlags()...)...)
		if r.code != 0 || strings.Contains(r.stdout, "dsh-sandbox-bench") {
			t.Errorf("images list --backend %s after bench = %d, %q; want the bench image removed", b, r.code, r.stdout)
		}
	}
}
