package docker

import (
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/prepare"
)

// TestContainerConfigHardening: the engine gets the policy's seccomp
// profile (the one WithDefaultSeccomp installs on the oci and containerd
// backends, not the engine's default), a private cgroup namespace, the
// policy's masked paths, and every bind from its staging mount,
// read-write at the engine (read-only comes with the staging mount); a
// bind that was not staged is refused.
func TestContainerConfigHardening(t *testing.T) {
	e := &Executor{instance: "i-test"}
	p := testPolicy(t)
	req := &sandbox.Request{Command: "true", Policy: p, Session: sandbox.Session{Cwd: "/srv/ws", TranscriptDir: "/srv/sessions/s1"}}
	call, err := prepare.Call(req, nil, func(string) (string, bool) { return "", false }, nil)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := policy.Mounts(p, req.Session, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var binds []stagedBind
	for i, m := range ms {
		if m.Type == "bind" {
			binds = append(binds, stagedBind{Source: "/state/docker-binds/i-test/c/" + strconv.Itoa(i), Target: m.Destination})
		}
	}
	user, err := remap{}.forCall(p, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	_, hc, err := e.containerConfig(call, req, 1000, 1000, user, ms, binds)
	if err != nil {
		t.Fatalf("containerConfig() = %v", err)
	}
	var profile string
	for _, o := range hc.SecurityOpt {
		if v, ok := strings.CutPrefix(o, "seccomp="); ok {
			profile = v
		}
	}
	var got specs.LinuxSeccomp
	if err := json.Unmarshal([]byte(profile), &got); err != nil {
		t.Fatalf("SecurityOpt %q: no seccomp=<json> profile: %v", hc.SecurityOpt, err)
	}
	want := &specs.Spec{}
	if err := policy.WithDefaultSeccomp()(want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, want.Linux.Seccomp) {
		t.Errorf("the engine's seccomp profile differs from the one WithDefaultSeccomp installs")
	}
	if !slices.Contains(hc.SecurityOpt, "no-new-privileges") {
		t.Errorf("SecurityOpt = %q, want no-new-privileges", hc.SecurityOpt)
	}
	if hc.CgroupnsMode != container.CgroupnsModePrivate {
		t.Errorf("CgroupnsMode = %q, want private", hc.CgroupnsMode)
	}
	for _, m := range []string{"/proc/cmdline", "/sys/kernel/vmcoreinfo", "/proc/kcore"} {
		if !slices.Contains(hc.MaskedPaths, m) {
			t.Errorf("MaskedPaths = %q, want %s", hc.MaskedPaths, m)
		}
	}
	if len(hc.Mounts) != len(binds) {
		t.Fatalf("Mounts = %+v, want the %d staged binds", hc.Mounts, len(binds))
	}
	for i, m := range hc.Mounts {
		if m.Source != binds[i].Source || m.Target != binds[i].Target || m.ReadOnly {
			t.Errorf("mount %d = %+v, want %s from %s, read-write at the engine", i, m, binds[i].Target, binds[i].Source)
		}
	}
	if _, _, err := e.containerConfig(call, req, 1000, 1000, user, ms, binds[:len(binds)-1]); err == nil {
		t.Errorf("containerConfig() with a bind not staged = nil error, want a refusal")
	}
}
