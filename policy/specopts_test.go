package policy

import (
	"errors"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func emptySpec() *specs.Spec {
	return &specs.Spec{Process: &specs.Process{}, Linux: &specs.Linux{}, Root: &specs.Root{}}
}

// applied returns a zero spec after every option SpecOpts gives for p and s.
func applied(t testing.TB, p sandbox.Policy, s sandbox.Session, uid, gid uint32) *specs.Spec {
	t.Helper()
	opts, err := SpecOpts(p, s, uid, gid)
	if err != nil {
		t.Fatalf("SpecOpts(%s, %+v, %d, %d) error = %v", p.Name, s, uid, gid, err)
	}
	spec := emptySpec()
	for i, o := range opts {
		if err := o(spec); err != nil {
			t.Fatalf("SpecOpts option %d error = %v", i, err)
		}
	}
	return spec
}

func builtin(t testing.TB, name string) sandbox.Policy {
	t.Helper()
	p, ok := Builtin(name)
	if !ok {
		t.Fatalf("Builtin(%q) = _, false", name)
	}
	return p
}

var testSession = sandbox.Session{ID: "s1", Cwd: "/srv/project", TranscriptDir: "/home/u/.dsh/sessions/--srv-project--/s1"}

func TestSpecOptsCapabilities(t *testing.T) {
	spec := applied(t, builtin(t, WorkspaceWrite), testSession, 1000, 1000)
	c := spec.Process.Capabilities
	if c == nil {
		t.Fatal("Process.Capabilities = nil, want five empty sets")
	}
	for name, set := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective, "inheritable": c.Inheritable, "permitted": c.Permitted, "ambient": c.Ambient} {
		if set == nil || len(set) != 0 {
			t.Errorf("capabilities %s = %v, want an empty, non-nil set", name, set)
		}
	}
	if !spec.Process.NoNewPrivileges {
		t.Errorf("Process.NoNewPrivileges = false, want true")
	}
	if !spec.Root.Readonly {
		t.Errorf("Root.Readonly = false, want true")
	}
}

func TestSpecOptsUserAndRlimits(t *testing.T) {
	spec := emptySpec()
	spec.Process.User = specs.User{UID: 0, GID: 0, AdditionalGids: []uint32{0, 27}}
	spec.Process.Rlimits = []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Soft: 1 << 20, Hard: 1 << 20}, {Type: "RLIMIT_NPROC", Soft: 5, Hard: 5}}
	opts, err := SpecOpts(builtin(t, WorkspaceWrite), testSession, 1000, 1001)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		if err := o(spec); err != nil {
			t.Fatal(err)
		}
	}
	u := spec.Process.User
	if u.UID != 1000 || u.GID != 1001 || len(u.AdditionalGids) != 0 {
		t.Errorf("Process.User = %+v, want 1000:1001 with no additional groups", u)
	}
	want := []specs.POSIXRlimit{{Type: "RLIMIT_NPROC", Soft: 5, Hard: 5}, {Type: "RLIMIT_NOFILE", Soft: NofileSoft, Hard: NofileHard}, {Type: "RLIMIT_CORE"}}
	if !slices.Equal(spec.Process.Rlimits, want) {
		t.Errorf("Process.Rlimits = %+v, want %+v", spec.Process.Rlimits, want)
	}
}

func TestSpecOptsNamespaces(t *testing.T) {
	spec := emptySpec()
	spec.Linux.Namespaces = []specs.LinuxNamespace{
		{Type: specs.NetworkNamespace, Path: "/proc/1/ns/net"},   // joining the host's: must go
		{Type: specs.CgroupNamespace, Path: "/proc/1/ns/cgroup"}, // the host's cgroup paths: must go
	}
	if err := WithNamespaces()(spec); err != nil {
		t.Fatal(err)
	}
	got := map[specs.LinuxNamespaceType]string{}
	for _, ns := range spec.Linux.Namespaces {
		if _, dup := got[ns.Type]; dup {
			t.Errorf("namespace %s listed twice", ns.Type)
		}
		got[ns.Type] = ns.Path
	}
	for _, typ := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.MountNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.NetworkNamespace, specs.CgroupNamespace} {
		path, ok := got[typ]
		if !ok || path != "" {
			t.Errorf("namespace %s = %q, present %v; want a new one (empty path)", typ, path, ok)
		}
	}
	if spec.Hostname != Hostname {
		t.Errorf("Hostname = %q, want %q", spec.Hostname, Hostname)
	}
}

func TestSpecOptsNetworkAlwaysNew(t *testing.T) {
	for _, network := range sandbox.NetworkModes {
		p := builtin(t, WorkspaceWrite)
		p.Network = network
		spec := applied(t, p, testSession, 1, 1)
		if !slices.ContainsFunc(spec.Linux.Namespaces, func(ns specs.LinuxNamespace) bool {
			return ns.Type == specs.NetworkNamespace && ns.Path == ""
		}) {
			t.Errorf("network %q: namespaces = %+v, want a new network namespace", network, spec.Linux.Namespaces)
		}
	}
}

func TestSpecOptsSeccomp(t *testing.T) {
	spec := applied(t, builtin(t, WorkspaceWrite), testSession, 1000, 1000)
	sc := spec.Linux.Seccomp
	if sc == nil {
		t.Fatal("Linux.Seccomp = nil, want Docker's default profile")
	}
	if sc.DefaultAction != specs.ActErrno {
		t.Errorf("Seccomp.DefaultAction = %s, want %s", sc.DefaultAction, specs.ActErrno)
	}
	if sc.DefaultErrnoRet == nil || *sc.DefaultErrnoRet != 1 {
		t.Errorf("Seccomp.DefaultErrnoRet = %v, want EPERM (1)", sc.DefaultErrnoRet)
	}
	if len(sc.Architectures) == 0 {
		t.Errorf("Seccomp.Architectures is empty, want the native architecture")
	}
	allowed := map[string]bool{}
	for _, rule := range sc.Syscalls {
		if rule.Action == specs.ActAllow && len(rule.Args) == 0 {
			for _, n := range rule.Names {
				allowed[n] = true
			}
		}
	}
	for _, name := range []string{"read", "write", "openat", "execve", "exit_group", "futex", "wait4"} {
		if !allowed[name] {
			t.Errorf("syscall %s is not allowed unconditionally, want allowed", name)
		}
	}
	// These need CAP_SYS_ADMIN, CAP_SYS_MODULE or CAP_SYS_BOOT, which no call has.
	for _, name := range []string{"mount", "umount2", "kexec_load", "init_module", "reboot", "bpf", "setns", "unshare"} {
		for _, rule := range sc.Syscalls {
			if rule.Action == specs.ActAllow && slices.Contains(rule.Names, name) {
				t.Errorf("syscall %s is allowed by %+v, want it denied", name, rule)
			}
		}
	}

	// Each spec gets its own copy.
	other := applied(t, builtin(t, WorkspaceWrite), testSession, 1000, 1000)
	other.Linux.Seccomp.Syscalls[0].Names[0] = "changed"
	*other.Linux.Seccomp.DefaultErrnoRet = 99
	if sc.Syscalls[0].Names[0] == "changed" || *sc.DefaultErrnoRet == 99 {
		t.Errorf("two specs share one seccomp profile")
	}
	again := applied(t, builtin(t, WorkspaceWrite), testSession, 1000, 1000)
	if again.Linux.Seccomp.Syscalls[0].Names[0] == "changed" {
		t.Errorf("changing a spec's profile changed the shared default")
	}
}

func TestSpecOptsMaskedPaths(t *testing.T) {
	spec := emptySpec()
	spec.Linux.MaskedPaths = []string{"/proc/kcore", "/proc/extra"}
	if err := WithMaskedPaths()(spec); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware", "/proc/cmdline", "/sys/kernel/vmcoreinfo", "/proc/extra"} {
		if !slices.Contains(spec.Linux.MaskedPaths, p) {
			t.Errorf("MaskedPaths = %v, want it to contain %s", spec.Linux.MaskedPaths, p)
		}
	}
	if n := len(spec.Linux.MaskedPaths); n != len(maskedPaths)+1 {
		t.Errorf("len(MaskedPaths) = %d, want %d (no duplicates)", n, len(maskedPaths)+1)
	}
	for _, p := range []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"} {
		if !slices.Contains(spec.Linux.ReadonlyPaths, p) {
			t.Errorf("ReadonlyPaths = %v, want it to contain %s", spec.Linux.ReadonlyPaths, p)
		}
	}
}

func TestSpecOptsDevices(t *testing.T) {
	spec := applied(t, builtin(t, WorkspaceWrite), testSession, 1, 1)
	devs := spec.Linux.Resources.Devices
	if len(devs) == 0 || devs[0].Allow || devs[0].Type != "" || devs[0].Major != nil || devs[0].Access != "rwm" {
		t.Fatalf("Devices[0] = %+v, want deny all (rwm)", devs)
	}
	got := map[[2]int64]bool{}
	for _, d := range devs[1:] {
		if !d.Allow || d.Type != "c" || d.Major == nil || d.Minor == nil {
			t.Errorf("device rule %+v, want an allow rule for one character device", d)
			continue
		}
		got[[2]int64{*d.Major, *d.Minor}] = true
	}
	for _, d := range [][2]int64{{1, 3}, {1, 5}, {1, 7}, {1, 8}, {1, 9}, {5, 0}} {
		if !got[d] {
			t.Errorf("device %d:%d is not allowed, want allowed", d[0], d[1])
		}
	}
	if len(got) != 6 {
		t.Errorf("allowed devices = %v, want exactly null, zero, full, random, urandom, tty", got)
	}
}

func TestSpecOptsResourcesCase(t *testing.T) {
	tests := []struct {
		name   string
		limits sandbox.Limits
		memory int64
		quota  int64
		pids   int64
	}{
		{"defaults", sandbox.Limits{}, 1 << 30, 100000, 256},
		{"ci", builtin(t, CI).Limits, 4 << 30, 200000, 1024},
		{"half a cpu", sandbox.Limits{MemoryBytes: 256 << 20, CPUs: 0.5, Pids: 10}, 256 << 20, 50000, 10},
		{"smallest quota", sandbox.Limits{CPUs: 0.01}, 1 << 30, 1000, 256},
	}
	for _, tt := range tests {
		spec := emptySpec()
		if err := WithResources(tt.limits)(spec); err != nil {
			t.Fatal(err)
		}
		r := spec.Linux.Resources
		switch {
		case r.Memory == nil || r.Memory.Limit == nil || *r.Memory.Limit != tt.memory:
			t.Errorf("%s: Memory = %+v, want limit %d", tt.name, r.Memory, tt.memory)
		case r.Memory.Swap == nil || *r.Memory.Swap != tt.memory:
			t.Errorf("%s: Memory.Swap = %v, want %d (swap included)", tt.name, r.Memory.Swap, tt.memory)
		case r.CPU == nil || r.CPU.Quota == nil || *r.CPU.Quota != tt.quota || r.CPU.Period == nil || *r.CPU.Period != 100000:
			t.Errorf("%s: CPU = %+v, want quota %d period 100000", tt.name, r.CPU, tt.quota)
		case r.Pids == nil || r.Pids.Limit == nil || *r.Pids.Limit != tt.pids:
			t.Errorf("%s: Pids = %+v, want %d", tt.name, r.Pids, tt.pids)
		}
	}
}

func mountAt(spec *specs.Spec, dest string) (specs.Mount, bool) {
	for _, m := range spec.Mounts {
		if m.Destination == dest {
			return m, true
		}
	}
	return specs.Mount{}, false
}

func TestSpecOptsMountsCase(t *testing.T) {
	p, err := Parse([]byte(`
workspace: ro
mounts: [{source: /data/ref, target: /ref, mode: ro}, {source: /data/out, target: /out/deep, mode: rw}]
tmpfs: [{target: /cache, size: 64Mi}]
`))
	if err != nil {
		t.Fatal(err)
	}
	s := sandbox.Session{Cwd: "/tmp/ws", TranscriptDir: "/tmp/ws/.dsh/s1"}
	spec := emptySpec()
	spec.Mounts = []specs.Mount{{Destination: "/proc", Type: "proc", Source: "proc"}, {Destination: "/tmp", Type: "bind", Source: "/host-tmp"}}
	opts, err := SpecOpts(p, s, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range opts {
		if err := o(spec); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		dest, typ, source string
		options           []string
	}{
		{"/proc", "proc", "proc", nil},
		{"/tmp", "tmpfs", "tmpfs", []string{"nosuid", "nodev", "mode=1777"}},
		{"/cache", "tmpfs", "tmpfs", []string{"nosuid", "nodev", "mode=0755", "uid=1000", "gid=1000", "size=67108864"}},
		{"/tmp/ws", "bind", "/tmp/ws", []string{"bind", "nosuid", "nodev", "ro"}},
		{"/tmp/ws/.dsh/s1", "bind", "/tmp/ws/.dsh/s1", []string{"bind", "nosuid", "nodev", "ro", "noexec"}},
		{"/ref", "bind", "/data/ref", []string{"bind", "nosuid", "nodev", "ro"}},
		{"/out/deep", "bind", "/data/out", []string{"bind", "nosuid", "nodev", "rw"}},
	}
	for _, tt := range tests {
		m, ok := mountAt(spec, tt.dest)
		if !ok || m.Type != tt.typ || m.Source != tt.source || !slices.Equal(m.Options, tt.options) {
			t.Errorf("mount at %s = %+v (found %v), want type %s source %s options %v", tt.dest, m, ok, tt.typ, tt.source, tt.options)
		}
	}
	if len(spec.Mounts) != len(tests) {
		t.Errorf("spec has %d mounts, want %d: %+v", len(spec.Mounts), len(tests), spec.Mounts)
	}
	// Parents are mounted before children.
	pos := func(dest string) int {
		return slices.IndexFunc(spec.Mounts, func(m specs.Mount) bool { return m.Destination == dest })
	}
	for _, pair := range [][2]string{{"/tmp", "/tmp/ws"}, {"/tmp/ws", "/tmp/ws/.dsh/s1"}} {
		if pos(pair[0]) > pos(pair[1]) {
			t.Errorf("mount %s comes after %s, want parents first: %+v", pair[0], pair[1], spec.Mounts)
		}
	}
}

func TestSpecOptsSessionMountsCase(t *testing.T) {
	tests := []struct {
		name                  string
		workspace, transcript string
		session               sandbox.Session
		wantDests             []string
	}{
		{"no session", "rw", "ro", sandbox.Session{}, []string{"/tmp"}},
		{"workspace none", "none", "ro", testSession, []string{"/tmp", testSession.TranscriptDir}},
		{"transcript none", "rw", "none", testSession, []string{"/tmp", "/srv/project"}},
		{"both", "rw", "ro", testSession, []string{"/tmp", "/srv/project", testSession.TranscriptDir}},
	}
	for _, tt := range tests {
		p := builtin(t, WorkspaceWrite)
		p.Workspace, p.Transcript = sandbox.WorkspaceMode(tt.workspace), sandbox.TranscriptMode(tt.transcript)
		spec := applied(t, p, tt.session, 1, 1)
		var got []string
		for _, m := range spec.Mounts {
			got = append(got, m.Destination)
			if !slices.Contains(m.Options, "nosuid") || !slices.Contains(m.Options, "nodev") {
				t.Errorf("%s: mount %+v lacks nosuid or nodev", tt.name, m)
			}
		}
		if !slices.Equal(got, tt.wantDests) {
			t.Errorf("%s: mounts = %v, want %v", tt.name, got, tt.wantDests)
		}
	}
}

func TestSpecOptsInvalidCase(t *testing.T) {
	withMount := func(target string) sandbox.Policy {
		p := builtin(t, WorkspaceWrite)
		p.Mounts = []sandbox.Mount{{Source: "/data", Target: target, ReadOnly: true}}
		return p
	}
	withTmpfs := func(target string) sandbox.Policy {
		p := builtin(t, WorkspaceWrite)
		p.Tmpfs = append(p.Tmpfs, sandbox.Tmpfs{Target: target})
		return p
	}
	ws := builtin(t, WorkspaceWrite)
	tests := []struct {
		name     string
		p        sandbox.Policy
		s        sandbox.Session
		uid      uint32
		wantText string
	}{
		{"invalid policy", sandbox.Policy{Name: "x"}, testSession, 1, "backend"},
		{"relative cwd", ws, sandbox.Session{Cwd: "work"}, 1, `session.cwd: "work" is not an absolute path`},
		{"unclean transcript", ws, sandbox.Session{TranscriptDir: "/a/../b"}, 1, "session.transcriptDir"},
		{"cwd is root", ws, sandbox.Session{Cwd: "/"}, 1, `session.cwd: "/" may not be mounted`},
		{"cwd under proc", ws, sandbox.Session{Cwd: "/proc/self"}, 1, `session.cwd: "/proc/self" may not be mounted`},
		{"transcript is cwd", ws, sandbox.Session{Cwd: "/w", TranscriptDir: "/w"}, 1, "is also the workspace"},
		{"mount on workspace", withMount("/srv/project"), testSession, 1, "overlaps session.cwd"},
		{"mount inside workspace", withMount("/srv/project/ref"), testSession, 1, "overlaps session.cwd"},
		{"mount above transcript", withMount("/home/u"), testSession, 1, "overlaps session.transcriptDir"},
		{"tmpfs on workspace", withTmpfs("/srv/project"), testSession, 1, "would hide session.cwd"},
		{"tmpfs inside transcript", withTmpfs(testSession.TranscriptDir + "/spill"), testSession, 1, "would hide session.transcriptDir"},
		{"uid -1", ws, testSession, 1<<32 - 1, "not a valid id"},
	}
	for _, tt := range tests {
		opts, err := SpecOpts(tt.p, tt.s, tt.uid, 1)
		if err == nil || !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tt.wantText) {
			t.Errorf("%s: SpecOpts(…, %+v) = %d opts, %v, want an invalid-argument error containing %q", tt.name, tt.s, len(opts), err, tt.wantText)
		}
	}
	// A workspace not mounted may overlap a policy mount.
	p := withMount("/srv/project")
	p.Workspace = "none"
	if _, err := SpecOpts(p, testSession, 1, 1); err != nil {
		t.Errorf("SpecOpts(workspace none, mount on cwd) error = %v, want nil", err)
	}
}

func TestSpecOptsNilSections(t *testing.T) {
	opts, err := SpecOpts(builtin(t, CI), testSession, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	spec := &specs.Spec{}
	for _, o := range opts {
		if err := o(spec); err != nil {
			t.Fatal(err)
		}
	}
	if spec.Process == nil || spec.Linux == nil || spec.Root == nil || !spec.Root.Readonly || spec.Linux.Resources.Pids == nil {
		t.Errorf("options on an empty spec = %+v, want Process, Linux and Root filled in", spec)
	}
}

// BenchmarkSpecOpts measures what a backend pays per call: building the
// options for a policy and session, then applying them to a fresh spec.
// The sub-benchmarks split the two; "apply-no-seccomp" is the baseline
// without the profile copy, the largest single part.
func BenchmarkSpecOpts(b *testing.B) {
	p := builtin(b, WorkspaceWrite)
	p.Mounts = []sandbox.Mount{{Source: "/data/ref", Target: "/ref", ReadOnly: true}}
	apply := func(b *testing.B, opts []SpecOpt) {
		spec := emptySpec()
		for _, o := range opts {
			if err := o(spec); err != nil {
				b.Fatal(err)
			}
		}
	}
	opts, err := SpecOpts(p, testSession, 1000, 1000)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("build+apply", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			opts, err := SpecOpts(p, testSession, 1000, 1000)
			if err != nil {
				b.Fatal(err)
			}
			apply(b, opts)
		}
	})
	b.Run("build", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := SpecOpts(p, testSession, 1000, 1000); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("apply", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			apply(b, opts)
		}
	})
	noSeccomp := slices.Clone(opts)
	noSeccomp[3] = func(*specs.Spec) error { return nil } // WithDefaultSeccomp
	b.Run("apply-no-seccomp", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			apply(b, noSeccomp)
		}
	})
}

// TestSpecOptsIgnoresEnv checks that the environment settings, which only
// prepare.Call reads (dropping DSH_* and secret-shaped names), neither
// fail the spec nor reach it.
func TestSpecOptsIgnoresEnv(t *testing.T) {
	p := builtin(t, WorkspaceWrite)
	p.EnvInherit = []string{"DSH_HOME", "OPENAI_API_KEY"}
	p.EnvSet = map[string]string{"DSH_SESSION_ID": "forged"}
	spec := applied(t, p, testSession, 1000, 1000)
	if len(spec.Process.Env) != 0 {
		t.Errorf("SpecOpts with env settings set Process.Env = %q, want nothing", spec.Process.Env)
	}
	if len(p.EnvInherit) != 2 || p.EnvSet["DSH_SESSION_ID"] != "forged" {
		t.Errorf("SpecOpts changed the caller's policy env: %q %v", p.EnvInherit, p.EnvSet)
	}
}

// TestSeccompBtrfsVolumeIoctls: ioctl is allowed by rules that together
// take every request outside _IOW(0x94, *, 4096) (btrfs subvolume and
// snapshot creation among them) and none inside: checked by evaluating
// the rules on sample requests, the high 32 bits (which the kernel
// ignores) set or not.
func TestSeccompBtrfsVolumeIoctls(t *testing.T) {
	sc := applied(t, builtin(t, WorkspaceWrite), testSession, 1000, 1000).Linux.Seccomp
	allows := func(req uint64) bool {
		for _, r := range sc.Syscalls {
			if r.Action != specs.ActAllow || !slices.Contains(r.Names, "ioctl") {
				continue
			}
			if len(r.Args) == 0 {
				return true
			}
			ok := true
			for _, a := range r.Args {
				if a.Index != 1 || a.Op != specs.OpMaskedEqual || req&a.Value != a.ValueTwo {
					ok = false
				}
			}
			if ok {
				return true
			}
		}
		return false
	}
	for _, req := range []uint64{0x5000940e, 0x50009418, 0x50009401, 0x50009417, 0x5000940f} {
		for _, high := range []uint64{0, 1 << 32} {
			if allows(req | high) {
				t.Errorf("ioctl %#x is allowed, want it refused (btrfs subvolume/snapshot request)", req|high)
			}
		}
	}
	// TCGETS, TIOCGWINSZ, FS_IOC_GETFLAGS, FIONREAD, BTRFS_IOC_INO_LOOKUP.
	for _, req := range []uint64{0x5401, 0x5413, 0x80086601, 0x541b, 0xd0009412} {
		if !allows(req) {
			t.Errorf("ioctl %#x is refused, want it allowed", req)
		}
	}
}
