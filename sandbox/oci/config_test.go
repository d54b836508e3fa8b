package oci

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// captureConfig runs req on e and returns the config.json the runtime
// was given, read just before the runtime starts.
func captureConfig(t *testing.T, e *Executor, req *sandbox.Request) (*specs.Spec, *sandbox.Result) {
	t.Helper()
	var spec *specs.Spec
	e.inject = func(step string) error {
		if step != "start" {
			return nil
		}
		paths, _ := filepath.Glob(filepath.Join(e.bundlesDir(), "*", bundleConfig))
		if len(paths) != 1 {
			t.Errorf("bundles with a config.json at start = %q, want one", paths)
			return nil
		}
		data, err := os.ReadFile(paths[0])
		if err != nil {
			t.Errorf("read config.json: %v", err)
			return nil
		}
		if fi, err := os.Stat(paths[0]); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("config.json mode = %v (%v), want 0600", fi.Mode().Perm(), err)
		}
		if fi, err := os.Stat(filepath.Dir(paths[0])); err != nil || fi.Mode().Perm() != 0o711 {
			t.Errorf("bundle mode = %v (%v), want 0711 (search only, for the mapped root)", fi.Mode().Perm(), err)
		}
		spec = new(specs.Spec)
		if err := json.Unmarshal(data, spec); err != nil {
			t.Errorf("config.json: %v", err)
		}
		return nil
	}
	defer func() { e.inject = nil }()
	res, err := e.Run(context.Background(), req)
	if err != nil {
		t.Fatalf("Run(%q) = %v", req.Command, err)
	}
	if spec == nil {
		t.Fatal("config.json was not captured")
	}
	return spec, res
}

func findMount(s *specs.Spec, dest string) (specs.Mount, bool) {
	for _, m := range s.Mounts {
		if m.Destination == dest {
			return m, true
		}
	}
	return specs.Mount{}, false
}

// TestConfigJSON checks the config.json of a call of a session: the
// parts this package owns and that the policy's options arrived.
func TestConfigJSON(t *testing.T) {
	e := newTestExecutor(t, RuntimeRunc)
	ws := t.TempDir()
	tr := filepath.Join(t.TempDir(), "sessions", "--proj--", "sess-1") // created by Run
	req := &sandbox.Request{
		Command: "echo hi",
		CallID:  "cfg-1",
		Session: sandbox.Session{ID: "sess-1", Cwd: ws, TranscriptDir: tr},
		Policy:  testPolicy(t, RuntimeRunc),
		Env:     []string{"ORDINARY=1"},
		DSHEnv:  []string{"DSH_SESSION_ID=sess-1", "DSH_SHELL=1"},
		Labels:  map[string]string{"team": "a"},
	}
	s, res := captureConfig(t, e, req)
	if res.Stdout.Text != "hi\n" {
		t.Errorf("stdout = %q, want %q", res.Stdout.Text, "hi\n")
	}
	if s.Version != "1.0.2" {
		t.Errorf("spec version = %q, want %q", s.Version, "1.0.2")
	}
	if s.Root == nil || s.Root.Path != bundleRootfs || !s.Root.Readonly {
		t.Errorf("root = %+v, want %q read-only", s.Root, bundleRootfs)
	}
	if s.Hostname != policy.Hostname {
		t.Errorf("hostname = %q, want %q", s.Hostname, policy.Hostname)
	}
	p := s.Process
	if p.Terminal || p.Cwd != ws {
		t.Errorf("process terminal %v, cwd %q, want false, %q", p.Terminal, p.Cwd, ws)
	}
	// The process is the stub, with an empty environment: the command
	// line and the environment reach it over its control channel and
	// never touch the disk.
	if !slices.Equal(p.Args, []string{stubTarget}) || len(p.Env) != 0 {
		t.Errorf("args = %q, env = %q; want the stub %q and no environment", p.Args, p.Env, stubTarget)
	}
	if m, ok := findMount(s, stubTarget); !ok || m.Type != "bind" || !slices.Contains(m.Options, "ro") || !slices.Contains(m.Options, "nosuid") {
		t.Errorf("stub mount = %+v (%v), want a read-only nosuid bind", m, ok)
	}
	if p.Capabilities == nil || len(p.Capabilities.Bounding)+len(p.Capabilities.Effective)+len(p.Capabilities.Permitted)+len(p.Capabilities.Inheritable)+len(p.Capabilities.Ambient) != 0 || !p.NoNewPrivileges {
		t.Errorf("capabilities %+v, noNewPrivileges %v, want all empty and true", p.Capabilities, p.NoNewPrivileges)
	}
	wantAnn := map[string]string{
		reap.LabelOwner: reap.LabelOwnerValue, reap.LabelInstance: e.instance,
		reap.LabelExecution: "cfg-1", reap.LabelSession: "sess-1", "team": "a",
	}
	for k, v := range wantAnn {
		if s.Annotations[k] != v {
			t.Errorf("annotation %q = %q, want %q", k, s.Annotations[k], v)
		}
	}
	l := s.Linux
	if l.CgroupsPath != "/dsh-sandbox/"+e.instance+"/cfg-1/container" {
		t.Errorf("cgroupsPath = %q, want /dsh-sandbox/%s/cfg-1/container", l.CgroupsPath, e.instance)
	}
	var ns []string
	for _, n := range l.Namespaces {
		if n.Path != "" {
			t.Errorf("namespace %s joins %q, want a new one", n.Type, n.Path)
		}
		ns = append(ns, string(n.Type))
	}
	slices.Sort(ns)
	if want := []string{"cgroup", "ipc", "mount", "network", "pid", "user", "uts"}; !slices.Equal(ns, want) {
		t.Errorf("namespaces = %q, want %q", ns, want)
	}
	// The workspace is root's (t.TempDir): the call is container root,
	// host uid MappedIDBase, and sees its binds through id-mapped
	// staging mounts in the bundle.
	if h, ok := policy.HostID(l.UIDMappings, p.User.UID); p.User.UID != 0 || !ok || h != policy.MappedIDBase {
		t.Errorf("user %d maps to host %d (%v) by %+v, want 0 → %d", p.User.UID, h, ok, l.UIDMappings, policy.MappedIDBase)
	}
	if l.Seccomp == nil || len(l.Seccomp.Syscalls) == 0 || l.Resources == nil || l.Resources.Memory == nil || l.Resources.Pids == nil {
		t.Errorf("seccomp %v, resources %+v: want the policy's profile and limits", l.Seccomp != nil, l.Resources)
	}
	staged := filepath.Join(e.bundlesDir(), "cfg-1", bundleBinds)
	if m, ok := findMount(s, tr); !ok || !slices.Contains(m.Options, "ro") || filepath.Dir(m.Source) != staged {
		t.Errorf("transcript mount = %+v (%v), want %q read-only at its own path from a staging mount in %s", m, ok, tr, staged)
	}
	if fi, err := os.Stat(tr); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("transcript dir created with %v (%v), want 0700", fi.Mode().Perm(), err)
	}
	if m, ok := findMount(s, ws); !ok || !slices.Contains(m.Options, "rw") || filepath.Dir(m.Source) != staged {
		t.Errorf("workspace mount = %+v (%v), want read-write from a staging mount in %s", m, ok, staged)
	}
	if m, ok := findMount(s, "/etc"); !ok || !slices.Contains(m.Options, "ro") || strings.HasPrefix(m.Source, "/etc") {
		t.Errorf("/etc mount = %+v (%v), want the generated /etc read-only", m, ok)
	}
	for _, m := range s.Mounts {
		if m.Destination == "/home" || m.Destination == "/root" || m.Source == "/etc/shadow" {
			t.Errorf("mount %+v exposes a forbidden path", m)
		}
		if m.Type == "bind" && !slices.Contains(m.Options, "nosuid") {
			t.Errorf("bind mount %+v is not nosuid", m)
		}
		if m.Type == "bind" && filepath.Dir(m.Source) != staged {
			t.Errorf("bind mount %+v is not from a staging mount in %s", m, staged)
		}
	}
	// /proc comes before every bind, and the image binds before the
	// workspace and transcript.
	idx := func(dest string) int {
		return slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == dest })
	}
	if !(idx("/proc") < idx("/usr") && idx("/usr") < idx(ws) && idx("/etc") < idx(tr)) {
		t.Errorf("mount order /proc %d, /usr %d, workspace %d, /etc %d, transcript %d: want base, image, policy", idx("/proc"), idx("/usr"), idx(ws), idx("/etc"), idx(tr))
	}
	if left := leftovers(t, e); len(left) > 0 {
		t.Errorf("left behind: %q", left)
	}
}
