//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// shellOwned are variables bash itself sets in the child.
var shellOwned = []string{"PWD", "SHLVL", "_", "OLDPWD"}

func TestExecEnvIsExactlyDesigned(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	hostile := []string{"DSH_STALE=1", "DSH_SESSION_ID=wrong", "OPENAI_API_KEY=x", "LD_PRELOAD=/x.so"}
	r := run(t, hostile, append(append([]string{"exec"}, e.flags("s1")...), "--", "env")...)
	if r.code != 0 {
		t.Fatalf("exec env exited %d: %s", r.code, r.stderr)
	}
	jsonlPath := jsonl.Path(e.root, session.Header{ID: "s1", Cwd: e.workspace}, jsonl.CompressionZstd)
	want := []string{
		"DSH_HOME=" + e.home,
		"DSH_SESSION_ID=s1",
		"DSH_SESSION_JSONL=" + jsonlPath,
		"DSH_SHELL=1",
		"GIT_PAGER=cat",
		"HOME=/tmp",
		"NO_COLOR=1",
		"PAGER=cat",
		"PATH=" + images.DefaultPath,
		"TERM=dumb",
	}
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		name, value, _ := strings.Cut(line, "=")
		if slices.Contains(shellOwned, name) {
			if name == "PWD" && value != e.workspace {
				t.Errorf("child PWD = %q, want the workspace %q", value, e.workspace)
			}
			continue
		}
		got = append(got, line)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("child env =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// seedTranscript writes a dsh log with a header line for id, and returns
// its path and bytes.
func seedTranscript(t *testing.T, e env, id string) (string, []byte) {
	t.Helper()
	path := jsonl.Path(e.root, session.Header{ID: id, Cwd: e.workspace}, jsonl.CompressionZstd)
	hdr, err := session.Header{ID: id, CreatedAt: 1, Cwd: e.workspace}.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	data := append(hdr, '\n')
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, data
}

func TestExecTranscriptReadOnlyAndAlone(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	path, before := seedTranscript(t, e, "s1")
	seedTranscript(t, e, "other-session")

	r := run(t, nil, append(append([]string{"exec"}, e.flags("s1")...), "--", `echo x >> "$DSH_SESSION_JSONL"`)...)
	if r.code == 0 || !strings.Contains(r.stderr, "Read-only file system") {
		t.Errorf("append to the transcript: exit %d, stderr %q; want a read-only failure", r.code, r.stderr)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Errorf("transcript changed to %q", after)
	}

	r = run(t, nil, append(append([]string{"exec"}, e.flags("s1")...), "--", `cat "$DSH_SESSION_JSONL"; ls "$(dirname "$(dirname "$DSH_SESSION_JSONL")")"`)...)
	if r.code != 0 {
		t.Fatalf("reading the transcript exited %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || lines[0] != strings.TrimSpace(string(before)) || lines[1] != "s1" {
		t.Errorf("inside: transcript + project dir listing = %q, want the header line and only %q", lines, "s1")
	}
}

// processesWith returns the host pids whose command line contains marker.
func processesWith(marker string) []string {
	var pids []string
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err == nil && strings.Contains(strings.ReplaceAll(string(cmdline), "\x00", " "), marker) {
			pids = append(pids, ent.Name())
		}
	}
	return pids
}

// cgroupsNamed returns cgroup directories whose name contains id.
func cgroupsNamed(t *testing.T, id string) []string {
	t.Helper()
	var found []string
	controllers, _ := os.ReadDir("/sys/fs/cgroup")
	for _, c := range controllers {
		filepath.WalkDir(filepath.Join("/sys/fs/cgroup", c.Name()), func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.Contains(d.Name(), id) {
				found = append(found, p)
				return filepath.SkipDir
			}
			return nil
		})
	}
	return found
}

func TestExecTimeoutKillsEverything(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	marker := "3017.5"
	start := time.Now()
	r := run(t, nil, append(append([]string{"exec", "--timeout", "1s", "--json"}, e.flags("s1")...), "--",
		"sleep "+marker+" & sleep "+marker)...)
	took := time.Since(start)
	if r.code != 124 {
		t.Fatalf("exec --timeout 1s exited %d, want 124 (stderr %q)", r.code, r.stderr)
	}
	t.Logf("timed-out call returned after %v", took.Round(time.Millisecond))
	var res struct {
		TimedOut bool `json:"timedOut"`
		Sandbox  struct {
			ContainerID string `json:"containerId"`
		} `json:"sandbox"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || !res.TimedOut || res.Sandbox.ContainerID == "" {
		t.Fatalf("exec --json printed %q (%v), want a timed-out result with a container id", r.stdout, err)
	}
	if pids := processesWith("sleep " + marker); len(pids) != 0 {
		t.Errorf("processes left after the timeout: %v", pids)
	}
	if cg := cgroupsNamed(t, res.Sandbox.ContainerID); len(cg) != 0 {
		t.Errorf("cgroups left after the timeout: %v", cg)
	}
	if bundles, _ := os.ReadDir(filepath.Join(e.state, "bundles")); len(bundles) != 0 {
		t.Errorf("%d bundles left in the state dir", len(bundles))
	}
}

func TestExecBadInputStartsNothing(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	badPolicy := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(badPolicy, []byte("name: bad\nnetwrok: none\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		pathEnv  string
		want     int
		mentions string
	}{
		{"unknown policy field", []string{"--policy", badPolicy}, "", 2, "netwrok"},
		{"negative timeout", []string{"--timeout", "-1s"}, "", 2, "--timeout"},
		{"DSH_ env", []string{"--env", "DSH_X=1"}, "", 2, "DSH_X"},
		{"missing image", []string{"--image", "no-such-image"}, "", 125, "no-such-image"},
		{"runtime not installed", []string{"--runtime", "crun"}, "/usr/sbin:/sbin", 125, "crun"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var extra []string
			if tt.pathEnv != "" {
				extra = []string{"PATH=" + tt.pathEnv}
			}
			args := append(append([]string{"exec"}, e.flags("s1")...), tt.args...)
			r := run(t, extra, append(args, "--", "touch "+filepath.Join(e.workspace, "ran"))...)
			if r.code != tt.want || !strings.Contains(r.stderr, tt.mentions) {
				t.Errorf("exec %v: exit %d, stderr %q; want exit %d naming %q", tt.args, r.code, r.stderr, tt.want, tt.mentions)
			}
			if _, err := os.Stat(filepath.Join(e.workspace, "ran")); err == nil {
				t.Errorf("exec %v ran the command", tt.args)
			}
			if bundles, _ := os.ReadDir(filepath.Join(e.state, "bundles")); len(bundles) != 0 {
				t.Errorf("exec %v left %d bundles", tt.args, len(bundles))
			}
		})
	}
}
