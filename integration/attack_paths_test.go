//go:build integration

package integration

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// attackBackend is one backend the path attacks run on: the flags that
// select it.
type attackBackend struct {
	name  string
	flags []string
}

// attackBackends are every backend and runtime: oci with runc, crun and
// runsc on the host image, docker and containerd on an imported busybox
// image. The daemon backends need the daemons of scripts/daemons.sh; in
// CI their absence fails the test (requireDaemons).
func attackBackends(t *testing.T, e env) []attackBackend {
	t.Helper()
	bs := []attackBackend{
		{"oci-runc", []string{"--backend", "oci", "--runtime", "runc"}},
		{"oci-crun", []string{"--backend", "oci", "--runtime", "crun"}},
		{"oci-runsc", []string{"--backend", "oci", "--runtime", "runsc"}},
	}
	if !daemonsAnswer() && os.Getenv("CI") != "true" {
		t.Logf("docker and containerd skipped: the daemons of scripts/daemons.sh do not answer")
		return bs
	}
	requireDaemons(t)
	name := "dsh-itest-busybox:1"
	importEverywhere(t, e, testImageTar(t), name)
	return append(bs,
		attackBackend{"docker", append([]string{"--backend", "docker", "--image", name}, daemonFlags()...)},
		attackBackend{"containerd", append([]string{"--backend", "containerd", "--image", name}, daemonFlags()...)})
}

// daemonsAnswer reports whether the Docker engine and the test
// containerd accept connections.
func daemonsAnswer() bool {
	dockerSock := strings.TrimPrefix(os.Getenv("DOCKER_HOST"), "unix://")
	if dockerSock == "" {
		dockerSock = "/var/run/docker.sock"
	}
	ctrd := os.Getenv("DSH_SANDBOX_TEST_CONTAINERD")
	if ctrd == "" {
		return false
	}
	for _, sock := range []string{dockerSock, ctrd} {
		c, err := net.DialTimeout("unix", sock, 2*time.Second)
		if err != nil {
			return false
		}
		c.Close()
	}
	return true
}

// execArgs are the arguments of `exec` for backend b in e: extra
// replaces the values of e.flags by flag name ("--cwd", "--home", …) and
// may add "--policy".
func execArgs(e env, session string, b attackBackend, extra map[string]string, command string) []string {
	f := e.flags(session)
	for i := 0; i+1 < len(f); i += 2 {
		if v, ok := extra[f[i]]; ok {
			f[i+1] = v
		}
	}
	args := append([]string{"exec"}, f...)
	args = append(args, b.flags...)
	if p, ok := extra["--policy"]; ok {
		args = append(args, "--policy", p)
	}
	return append(args, "--", command)
}

// refused checks that r is a refusal (exit 2 or 125) whose message names
// every one of mention.
func refused(t *testing.T, what string, r result, mention ...string) {
	t.Helper()
	if r.code != 2 && r.code != 125 {
		t.Errorf("%s: exit %d, stdout %q, stderr %q; want a refusal (2 or 125)", what, r.code, r.stdout, r.stderr)
		return
	}
	for _, m := range mention {
		if !strings.Contains(r.stderr, m) {
			t.Errorf("%s: stderr %q does not name %q", what, r.stderr, m)
		}
	}
}

func TestAttackPaths(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	for _, b := range attackBackends(t, e) {
		t.Run(b.name, func(t *testing.T) {
			e := newEnv(t)
			attackSymlinkCwd(t, e, b)
			attackSessionsRootInWorkspace(t, e, b)
			attackSwappedSessionDir(t, e, b)
			attackUnboundedSpill(t, e, b)
		})
	}
}

// (a) --cwd through a link the agent planted, and --cwd /etc: refused,
// nothing mounted; the real workspace works and is writable.
func attackSymlinkCwd(t *testing.T, e env, b attackBackend) {
	marker := "dsh-itest-pwned-" + filepath.Base(filepath.Dir(e.workspace))
	link := filepath.Join(e.workspace, "link")
	if err := os.Symlink("/", link); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(link)
	for _, cwd := range []string{link, link + "/tmp", "/etc", "/"} {
		r := run(t, nil, execArgs(e, "", b, map[string]string{"--cwd": cwd}, "touch ./"+marker)...)
		refused(t, "exec --cwd "+cwd, r, "--cwd")
	}
	for _, p := range []string{"/" + marker, "/tmp/" + marker, "/etc/" + marker} {
		if _, err := os.Lstat(p); err == nil {
			os.Remove(p)
			t.Errorf("a refused call wrote %s on the host", p)
		}
	}
	r := run(t, nil, execArgs(e, "", b, nil, "touch ./written && echo ok")...)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "ok" {
		t.Fatalf("exec in the real workspace: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(e.workspace, "written")); err != nil {
		t.Errorf("the real workspace is not writable: %v", err)
	}
}

// (b) the dsh home and sessions root inside the workspace: refused,
// naming both paths; outside it the same call works.
func attackSessionsRootInWorkspace(t *testing.T, e env, b attackBackend) {
	home := filepath.Join(e.workspace, ".dsh")
	sessions := filepath.Join(home, "sessions")
	if err := os.MkdirAll(sessions, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(home)
	r := run(t, nil, execArgs(e, "s1", b, map[string]string{"--home": home, "--sessions-root": sessions}, "cat /dev/null")...)
	refused(t, "exec with the sessions root in the workspace", r, sessions, e.workspace)
	if entries, _ := os.ReadDir(sessions); len(entries) != 0 {
		t.Errorf("a refused call created %d entries in the sessions root", len(entries))
	}
	r = run(t, nil, execArgs(e, "s1", b, nil, "echo ok")...)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "ok" {
		t.Errorf("exec with the sessions root outside the workspace: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// (c) a session directory swapped for a link to a host directory (what a
// call could do when the sessions root was exposed): the next call is
// refused and nothing, no spill file in particular, is written into the
// link's target.
func attackSwappedSessionDir(t *testing.T, e env, b attackBackend) {
	sessDir := filepath.Dir(jsonl.Path(e.root, session.Header{ID: "s-swap", Cwd: e.workspace}, jsonl.CompressionZstd))
	r := run(t, nil, execArgs(e, "s-swap", b, nil, "echo first")...)
	if r.code != 0 {
		t.Fatalf("first call: exit %d, stderr %q", r.code, r.stderr)
	}
	if fi, err := os.Lstat(sessDir); err != nil || !fi.IsDir() {
		t.Fatalf("session directory %s after the first call: %v, %v", sessDir, fi, err)
	}
	victim := filepath.Join(filepath.Dir(e.root), "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(sessDir, sessDir+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, sessDir); err != nil {
		t.Fatal(err)
	}
	// Enough output to spill.
	r = run(t, nil, execArgs(e, "s-swap", b, nil, "head -c 300000 /dev/zero")...)
	refused(t, "exec with a swapped session directory", r, "session.transcriptDir", "symbolic link")
	if entries, _ := os.ReadDir(victim); len(entries) != 0 {
		t.Errorf("the link target %s got %d entries (spill written through the link)", victim, len(entries))
	}
}

// (d) three calls each printing 20 MB under spillTotalBytes 32Mi: the
// session's spill directory stays within 32 MiB and every call succeeds
// with truncated output.
func attackUnboundedSpill(t *testing.T, e env, b attackBackend) {
	pol := filepath.Join(filepath.Dir(e.root), "spill-policy.yaml")
	if err := os.WriteFile(pol, []byte("name: spill-bounded\nlimits: {spillTotalBytes: 32Mi}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spillDir := filepath.Join(filepath.Dir(jsonl.Path(e.root, session.Header{ID: "s-spill", Cwd: e.workspace}, jsonl.CompressionZstd)), "spill")
	for i := range 3 {
		args := execArgs(e, "s-spill", b, map[string]string{"--policy": pol}, "head -c 20000000 /dev/zero")
		args = append(args[:len(args)-2], "--json", "--", args[len(args)-1])
		r := run(t, nil, args...)
		if r.code != 0 {
			t.Fatalf("call %d: exit %d, stderr %q", i, r.code, r.stderr)
		}
		var res struct {
			Stdout struct {
				Truncated    bool  `json:"truncated"`
				DroppedBytes int64 `json:"droppedBytes"`
			} `json:"stdout"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || !res.Stdout.Truncated || res.Stdout.DroppedBytes <= 0 {
			t.Errorf("call %d: result %.200q (%v), want truncated stdout", i, r.stdout, err)
		}
		var total int64
		entries, err := os.ReadDir(spillDir)
		if err != nil {
			t.Fatalf("call %d: spill directory: %v", i, err)
		}
		for _, ent := range entries {
			if fi, err := ent.Info(); err == nil {
				total += fi.Size()
			}
		}
		if total > 32<<20 || total < 16<<20 {
			t.Errorf("after call %d the spill directory holds %d bytes, want this call's spill (≥ 16 MiB) and at most 32 MiB", i, total)
		}
	}
}
