package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestCallIDMappingCase(t *testing.T) {
	B := MappedIDBase
	for _, c := range []struct {
		name     string
		uid, gid uint32
		want     []specs.LinuxIDMapping // the uid map
		wantErr  bool
	}{
		{"root", 0, 0, []specs.LinuxIDMapping{{ContainerID: 0, HostID: B, Size: MappedIDCount}}, false},
		{"uid-1000", 1000, 1000, []specs.LinuxIDMapping{
			{ContainerID: 0, HostID: B, Size: 1000},
			{ContainerID: 1000, HostID: 1000, Size: 1},
			{ContainerID: 1001, HostID: B + 1001, Size: MappedIDCount - 1001},
		}, false},
		{"uid-top-of-range", MappedIDCount - 1, 0, []specs.LinuxIDMapping{
			{ContainerID: 0, HostID: B, Size: MappedIDCount - 1},
			{ContainerID: MappedIDCount - 1, HostID: MappedIDCount - 1, Size: 1},
		}, false},
		{"uid-above-range", 100000, 0, []specs.LinuxIDMapping{
			{ContainerID: 0, HostID: B, Size: MappedIDCount},
			{ContainerID: 100000, HostID: 100000, Size: 1},
		}, false},
		{"uid-in-host-range", B + 5, 0, nil, true},
		{"gid-in-host-range", 1000, B, nil, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := CallIDMapping(c.uid, c.gid)
			if c.wantErr {
				if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "user") {
					t.Fatalf("CallIDMapping(%d, %d) error = %v, want ErrInvalid naming user", c.uid, c.gid, err)
				}
				return
			}
			if err != nil || !slices.Equal(m.UIDs, c.want) {
				t.Fatalf("CallIDMapping(%d, %d) = %+v, %v; want uids %+v", c.uid, c.gid, m.UIDs, err, c.want)
			}
			// The call's ids map to themselves unless 0; no map reaches
			// host 0, and no host id is mapped twice.
			for _, pair := range []struct {
				own uint32
				m   []specs.LinuxIDMapping
			}{{c.uid, m.UIDs}, {c.gid, m.GIDs}} {
				h, ok := HostID(pair.m, pair.own)
				if !ok || h == 0 || (pair.own != 0 && h != pair.own) {
					t.Errorf("HostID(%d) = %d, %v; want %d (or a mapped id for 0)", pair.own, h, ok, pair.own)
				}
				if _, ok := HostID(pair.m, MappedIDCount+200000); ok && pair.own != MappedIDCount+200000 {
					t.Errorf("an id outside the range is mapped")
				}
				seen := map[uint32]bool{}
				for _, e := range pair.m {
					if e.HostID == 0 || e.Size == 0 {
						t.Errorf("map entry %+v reaches host 0 or is empty", e)
					}
					for i := uint32(0); i < e.Size; i += 997 {
						if seen[e.HostID+i] {
							t.Errorf("host id %d mapped twice", e.HostID+i)
						}
						seen[e.HostID+i] = true
					}
				}
			}
		})
	}
}

func TestParseUserHostRoot(t *testing.T) {
	uid, gid, auto, err := UserHostRoot.IDs()
	if err != nil || uid != 0 || gid != 0 || auto {
		t.Fatalf("IDs(%q) = %d, %d, %v, %v; want 0, 0, false, nil", UserHostRoot, uid, gid, auto, err)
	}
	for _, bad := range []sandbox.User{"host-root:0", "Host-Root", "root", "hostroot"} {
		if _, _, _, err := bad.IDs(); err == nil {
			t.Errorf("IDs(%q) = nil error, want refused", bad)
		}
	}
	p := sandbox.Policy{User: UserHostRoot}
	if !HostRoot(p) || HostRoot(sandbox.Policy{User: "0:0"}) || HostRoot(sandbox.Policy{User: "auto"}) {
		t.Errorf("HostRoot: only %q may ask for host root", UserHostRoot)
	}
	ws := Warnings(p, sandbox.Session{}, 0, 0)
	if len(ws) != 1 || !strings.Contains(ws[0], "host-root") {
		t.Errorf("Warnings(user host-root) = %q, want one warning naming host-root", ws)
	}
	if ws := Warnings(sandbox.Policy{User: "0:0", Backend: "oci", Runtime: "runc"}, sandbox.Session{}, 0, 0); len(ws) != 0 {
		t.Errorf("Warnings(user 0:0 on runc) = %q, want none (a user namespace maps it)", ws)
	}
	if ws := Warnings(sandbox.Policy{User: "0:0", Backend: "oci", Runtime: "runsc"}, sandbox.Session{}, 0, 0); len(ws) != 0 {
		t.Errorf("Warnings(user 0:0 on runsc) = %q, want none (a user namespace maps gVisor's gofer too)", ws)
	}
	if e := Explain(withDefaults(t, UserHostRoot)); !strings.Contains(e, "WARNING: user: host-root") {
		t.Errorf("Explain(user host-root) lacks the warning:\n%s", e)
	}
}

// withDefaults is a valid built-in policy with user set.
func withDefaults(t *testing.T, user sandbox.User) sandbox.Policy {
	t.Helper()
	p, ok := Builtin("workspace-write")
	if !ok {
		t.Fatal("no built-in workspace-write")
	}
	p.User = user
	return p
}

func TestWithUserNamespace(t *testing.T) {
	m, err := CallIDMapping(1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	s := &specs.Spec{Linux: &specs.Linux{Namespaces: []specs.LinuxNamespace{{Type: specs.UserNamespace, Path: "/proc/1/ns/user"}}}}
	if err := WithUserNamespace(m)(s); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.UserNamespace {
			n++
			if ns.Path != "" {
				t.Errorf("user namespace joins %q, want a new one", ns.Path)
			}
		}
	}
	if n != 1 || !slices.Equal(s.Linux.UIDMappings, m.UIDs) || !slices.Equal(s.Linux.GIDMappings, m.GIDs) {
		t.Errorf("spec = %d user namespaces, uids %+v, gids %+v; want one and the maps", n, s.Linux.UIDMappings, s.Linux.GIDMappings)
	}
	if err := WithUserNamespace(IDMapping{})(&specs.Spec{}); err == nil {
		t.Errorf("WithUserNamespace(empty) = nil, want an error")
	}
}

func TestWithoutSetidModes(t *testing.T) {
	s := &specs.Spec{}
	if err := WithoutSetidModes()(s); err == nil {
		t.Fatalf("without a profile: nil error, want one")
	}
	if err := WithDefaultSeccomp()(s); err != nil {
		t.Fatal(err)
	}
	if err := WithoutSetidModes()(s); err != nil {
		t.Fatal(err)
	}
	rules := map[string][]specs.LinuxSyscall{}
	for _, r := range s.Linux.Seccomp.Syscalls {
		for _, n := range r.Names {
			rules[n] = append(rules[n], r)
		}
	}
	for name, idx := range modeArgs {
		rs := rules[name]
		if len(rs) != 1 || rs[0].Action != specs.ActAllow || len(rs[0].Args) != 1 {
			t.Errorf("%s rules = %+v, want exactly one conditional allow", name, rs)
			continue
		}
		a := rs[0].Args[0]
		if a.Index != idx || a.Value != 0o6000 || a.ValueTwo != 0 || a.Op != specs.OpMaskedEqual {
			t.Errorf("%s allow condition = %+v, want mode (arg %d) & 06000 == 0", name, a, idx)
		}
	}
	if rs := rules["openat2"]; len(rs) != 1 || rs[0].Action != specs.ActErrno {
		t.Errorf("openat2 rules = %+v, want one errno rule", rs)
	}
	// The legitimate rest of the profile is untouched.
	for _, n := range []string{"read", "write", "execve", "mkdir"} {
		if rs := rules[n]; len(rs) == 0 || rs[0].Action != specs.ActAllow || len(rs[0].Args) != 0 {
			t.Errorf("%s rules = %+v, want an unconditional allow", n, rs)
		}
	}
}
