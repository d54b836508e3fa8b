package policy

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/safefile"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestParseDefaults(t *testing.T) {
	p, err := Parse([]byte("{}"))
	if err != nil {
		t.Fatalf("Parse(%q) error = %v", "{}", err)
	}
	want := sandbox.Policy{
		Name: "custom", Backend: "oci", Runtime: "runc", Image: "host", User: "auto",
		Network: "none", Workspace: "rw", Transcript: "ro",
		Tmpfs: []sandbox.Tmpfs{{Target: "/tmp"}},
		Limits: sandbox.Limits{
			MemoryBytes: 1 << 30, CPUs: 1, Pids: 256, TimeoutMs: 120000, MaxTimeoutMs: 600000,
			StdoutMaxBytes: 64000, SpillMaxBytes: 64 << 20,
		},
		EnvInherit: []string{"LANG", "TZ"},
	}
	want.Digest = p.Digest
	if !reflect.DeepEqual(p, want) {
		t.Errorf("Parse(%q) = %+v, want %+v", "{}", p, want)
	}
	if !strings.HasPrefix(p.Digest, "sha256:") || len(p.Digest) != len("sha256:")+64 {
		t.Errorf("Parse(%q).Digest = %q, want sha256:<64 hex>", "{}", p.Digest)
	}
}

const fullYAML = `
name: strict
backend: oci
runtime: crun
image: busybox:1.36
user: "1000:1000"
network: loopback
workspace: ro
transcript: none
mounts:
  - {source: /data/out, target: /out, mode: rw}
  - {source: /data/ref, target: /ref, mode: ro}
tmpfs: [{target: /scratch, size: 16Mi}, {target: /tmp, size: 256Mi}]
limits: {memory: 512Mi, cpus: 0.5, pids: 64, timeoutMs: 30000, maxTimeoutMs: 60000,
         stdoutMaxBytes: 32k, spillMaxBytes: 1Gi}
env: {inherit: [TZ, LANG, HTTPS_PROXY], set: {GOFLAGS: -mod=mod, DEBUG: 1, VERBOSE: true}}
`

func TestParseFull(t *testing.T) {
	p, err := Parse([]byte(fullYAML))
	if err != nil {
		t.Fatalf("Parse(fullYAML) error = %v", err)
	}
	want := sandbox.Policy{
		Name: "strict", Digest: p.Digest, Backend: "oci", Runtime: "crun", Image: "busybox:1.36",
		User: "1000:1000", Network: "loopback", Workspace: "ro", Transcript: "none",
		Mounts: []sandbox.Mount{
			{Source: "/data/out", Target: "/out", ReadOnly: false},
			{Source: "/data/ref", Target: "/ref", ReadOnly: true},
		},
		Tmpfs: []sandbox.Tmpfs{{Target: "/scratch", SizeBytes: 16 << 20}, {Target: "/tmp", SizeBytes: 256 << 20}},
		Limits: sandbox.Limits{
			MemoryBytes: 512 << 20, CPUs: 0.5, Pids: 64, TimeoutMs: 30000, MaxTimeoutMs: 60000,
			StdoutMaxBytes: 32000, SpillMaxBytes: 1 << 30,
		},
		EnvInherit: []string{"HTTPS_PROXY", "LANG", "TZ"},
		EnvSet:     map[string]string{"GOFLAGS": "-mod=mod", "DEBUG": "1", "VERBOSE": "true"},
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("Parse(fullYAML) =\n%+v\nwant\n%+v", p, want)
	}
}

func TestParseJSON(t *testing.T) {
	in := "{\n\t\"name\": \"j\",\n\t\"limits\": {\"memory\": 268435456, \"pids\": 10},\n\t\"mounts\": [{\"source\": \"/a\", \"target\": \"/b\", \"mode\": \"ro\"}]\n}"
	p, err := Parse([]byte(in))
	if err != nil {
		t.Fatalf("Parse(%q) error = %v", in, err)
	}
	if p.Name != "j" || p.Limits.MemoryBytes != 256<<20 || p.Limits.Pids != 10 || len(p.Mounts) != 1 || !p.Mounts[0].ReadOnly {
		t.Errorf("Parse(%q) = %+v, want name j, memory 256Mi, pids 10, one ro mount", in, p)
	}
}

func TestParseDigest(t *testing.T) {
	a, errA := Parse([]byte("env: {inherit: [TZ, LANG]}\nmounts: [{source: /x, target: /b, mode: ro}, {source: /y, target: /a, mode: ro}]"))
	b, errB := Parse([]byte("mounts: [{source: /y, target: /a, mode: ro}, {source: /x, target: /b, mode: ro}]\nenv: {inherit: [LANG, TZ]}"))
	c, errC := Parse([]byte("mounts: [{source: /y, target: /a, mode: rw}, {source: /x, target: /b, mode: ro}]\nenv: {inherit: [LANG, TZ]}"))
	if err := errors.Join(errA, errB, errC); err != nil {
		t.Fatal(err)
	}
	if a.Digest != b.Digest {
		t.Errorf("digests of reordered documents differ: %s vs %s", a.Digest, b.Digest)
	}
	if a.Digest == c.Digest {
		t.Errorf("digest did not change when a mount became rw: %s", a.Digest)
	}
	ws, _ := Builtin(WorkspaceWrite)
	named, err := Parse([]byte("name: workspace-write"))
	if err != nil {
		t.Fatal(err)
	}
	if named.Digest != ws.Digest {
		t.Errorf("Parse(name: workspace-write).Digest = %s, want the built-in's %s", named.Digest, ws.Digest)
	}
}

func TestParseTimeoutFollowsMax(t *testing.T) {
	p, err := Parse([]byte("limits: {maxTimeoutMs: 60000}"))
	if err != nil {
		t.Fatal(err)
	}
	if p.Limits.TimeoutMs != 60000 {
		t.Errorf("Parse(maxTimeoutMs 60000).Limits.TimeoutMs = %d, want 60000", p.Limits.TimeoutMs)
	}
}

func TestParseInvalidCase(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string // substrings of the error
	}{
		{"unknown top-level field", "nmae: x", []string{`nmae: unknown field`}},
		{"unknown nested field", "limits: {memroy: 1Gi}", []string{"limits.memroy: unknown field", "want one of memory, cpus"}},
		{"unknown field in list", "mounts: [{sorce: /a, target: /b, mode: ro}]", []string{"mounts[0].sorce: unknown field"}},
		{"mount source missing", "mounts: [{target: /b, mode: ro}]", []string{"mounts[0].source: is missing or empty"}},
		{"field case matters", "Limits: {memory: 1Gi}", []string{"Limits: unknown field"}},
		{"negative pids", "limits: {pids: -5}", []string{"limits.pids: -5 is not allowed"}},
		{"zero pids", "limits: {pids: 0}", []string{"limits.pids: 0 is not allowed"}},
		{"fractional pids", "limits: {pids: 1.5}", []string{"limits.pids: 1.5 is not a 64-bit integer"}},
		{"huge pids", "limits: {pids: 99999999999999999999}", []string{"limits.pids:", "not a 64-bit integer"}},
		{"memory lots", "limits: {memory: lots}", []string{`limits.memory: "lots" is not a size`}},
		{"memory negative", "limits: {memory: -1Gi}", []string{`limits.memory: "-1Gi" is not a size`}},
		{"memory zero", "limits: {memory: 0}", []string{"limits.memory: is 0"}},
		{"memory tiny", "limits: {memory: 1Ki}", []string{"limits.memory: 1024 bytes is below the minimum of 6Mi"}},
		{"memory overflow", "limits: {memory: 99999999999Ti}", []string{"limits.memory:", "too large"}},
		{"memory as list", "limits: {memory: [1]}", []string{"limits.memory: is a list; want a size"}},
		{"cpus zero", "limits: {cpus: 0}", []string{"limits.cpus: 0 is not allowed"}},
		{"cpus negative", "limits: {cpus: -1}", []string{"limits.cpus: -1 is not allowed"}},
		{"cpus string", "limits: {cpus: one}", []string{"limits.cpus: is a string; want a number"}},
		{"cpus inf", "limits: {cpus: .inf}", []string{"not valid YAML or JSON"}},
		{"timeout above max", "limits: {timeoutMs: 700000}", []string{"limits.timeoutMs: 700000 exceeds limits.maxTimeoutMs 600000"}},
		{"max above ceiling", "limits: {maxTimeoutMs: 600001}", []string{"limits.maxTimeoutMs: 600001 is not allowed"}},
		{"timeout zero", "limits: {timeoutMs: 0}", []string{"limits.timeoutMs: 0 is not allowed"}},
		{"stdout too big", "limits: {stdoutMaxBytes: 1Ti}", []string{"limits.stdoutMaxBytes:", "is not allowed"}},
		{"user root", "user: root", []string{`user: "root" is not allowed; want "auto" or "uid:gid"`}},
		{"user no gid", `user: "1000"`, []string{`user: "1000" is not allowed`}},
		{"user negative", `user: "-1:0"`, []string{`user: "-1:0" is not allowed`}},
		{"user out of range", `user: "4294967295:0"`, []string{`user: "4294967295:0" is not allowed`}},
		{"user number", "user: 1000", []string{"user: is a number; want a string (quote it in YAML)"}},
		{"backend enum", "backend: podman", []string{`backend: "podman" is not allowed; want one of oci, docker, containerd, local`}},
		{"runtime enum", "runtime: kata", []string{`runtime: "kata" is not allowed; want one of runc, crun, runsc`}},
		{"network enum", "network: host", []string{`network: "host" is not allowed; want one of none, loopback`}},
		{"workspace enum", "workspace: yes", []string{"workspace: is a boolean; want a string"}},
		{"workspace empty", `workspace: ""`, []string{`workspace: "" is not allowed; want one of rw, ro, none`}},
		{"transcript rw", "transcript: rw", []string{`transcript: "rw" is not allowed; want one of ro, none`}},
		{"null value", "workspace:", []string{"workspace: has no value (null)"}},
		{"empty document", "", []string{"document is empty"}},
		{"not a mapping", "[1, 2]", []string{"policy: document: is a list; want a mapping"}},
		{"bad name", "name: ../etc", []string{`name: "../etc" may hold only`}},
		{"bad image", "image: 'a b'", []string{`image: "a b" is not "host" or an image reference`}},
		{"relative mount source", "mounts: [{source: data, target: /data, mode: ro}]", []string{`mounts[0].source: "data" is not an absolute path`}},
		{"unclean mount source", "mounts: [{source: /data/../etc, target: /data, mode: ro}]", []string{`mounts[0].source: "/data/../etc" is not a clean path; write "/etc"`}},
		{"mount source newline", `mounts: [{source: "/a\nb", target: /x, mode: ro}]`, []string{`mounts[0].source: "/a\nb" contains a control character`}},
		{"mount source proc", "mounts: [{source: /proc/1/root, target: /h, mode: ro}]", []string{`mounts[0].source: "/proc/1/root" may not be /`}},
		{"mount source root", "mounts: [{source: /, target: /h, mode: ro}]", []string{`mounts[0].source: "/" may not be /`}},
		{"mount target root", "mounts: [{source: /a, target: /, mode: ro}]", []string{`mounts[0].target: "/" may not be /`}},
		{"mount target proc", "mounts: [{source: /a, target: /proc, mode: ro}]", []string{`mounts[0].target: "/proc" may not be /`}},
		{"mount target below dev", "mounts: [{source: /a, target: /dev/shm, mode: rw}]", []string{`mounts[0].target: "/dev/shm" may not be /`}},
		{"mount target sys", "mounts: [{source: /a, target: /sys, mode: ro}]", []string{`mounts[0].target: "/sys" may not be /`}},
		{"mount target tmp", "mounts: [{source: /a, target: /tmp, mode: rw}]", []string{`mounts[0].target: "/tmp" is already the target of tmpfs`}},
		{"duplicate targets", "mounts: [{source: /a, target: /x, mode: ro}, {source: /b, target: /x, mode: ro}]", []string{`mounts[1].target: "/x" is already the target of mounts[0].target`}},
		{"mount mode missing", "mounts: [{source: /a, target: /x}]", []string{"mounts[0].mode: is missing"}},
		{"mount mode bad", "mounts: [{source: /a, target: /x, mode: rwx}]", []string{`mounts[0].mode: "rwx" is not allowed; want one of ro, rw`}},
		{"tmpfs size zero", "tmpfs: [{target: /tmp, size: 0}]", []string{"tmpfs[0].size: is 0"}},
		{"tmpfs target relative", "tmpfs: [{target: tmp}]", []string{`tmpfs[0].target: "tmp" is not an absolute path`}},
		{"tmpfs target dev", "tmpfs: [{target: /dev}]", []string{`tmpfs[0].target: "/dev" may not be /`}},
		{"env.set DSH", "env: {set: {DSH_X: 1}}", []string{"env.set.DSH_X: DSH_* names may not be set"}},
		{"env.set dsh lower case", "env: {set: {dsh_home: /x}}", []string{"env.set.dsh_home: DSH_* names may not be set"}},
		{"env.set equals in name", `env: {set: {"A=B": x}}`, []string{`env.set: name "A=B" contains '='`}},
		{"env.set NUL in value", "{\"env\": {\"set\": {\"A\": \"x\\u0000y\"}}}", []string{"env.set.A: the value contains a NUL byte"}},
		{"env.set null value", "env: {set: {A: }}", []string{"env.set.A: has no value"}},
		{"env.set list value", "env: {set: {A: [1]}}", []string{"env.set.A: is a list; want a string, number or boolean"}},
		{"env.inherit DSH", "env: {inherit: [DSH_HOME]}", []string{`env.inherit[0]: "DSH_HOME" may not be inherited`}},
		{"env.inherit bad name", "env: {inherit: [\"A=B\"]}", []string{`env.inherit[0]: "A=B" is not a variable name`}},
		{"env.inherit twice", "env: {inherit: [TZ, TZ]}", []string{`env.inherit[1]: "TZ" is listed twice`}},
		{"duplicate key", "name: a\nname: b", []string{"not valid YAML or JSON", `key "name" already set`}},
		{"duplicate JSON key", `{"name": "a", "name": "b"}`, []string{"not valid YAML or JSON"}},
		{"several problems at once", "limits: {pids: -1, cpus: 0}\nuser: root", []string{"limits.pids:", "limits.cpus:", "user:"}},
		{"yaml bomb", yamlBomb, []string{"excessive aliasing"}},
		{"deep nesting", strings.Repeat("[", 20000) + strings.Repeat("]", 20000), []string{"not valid YAML or JSON"}},
		{"too large", "name: x\n" + strings.Repeat("#", MaxFileSize), []string{"document is 1048584 bytes; the limit is 1048576"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.in))
			if err == nil {
				t.Fatalf("Parse(%.60q) = %+v, want an error containing %q", tt.in, p, tt.want)
			}
			if !errors.Is(err, sandbox.ErrInvalid) {
				t.Errorf("Parse(%.60q) error %v does not wrap sandbox.ErrInvalid", tt.in, err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse(%.60q) error = %v, want it to contain %q", tt.in, err, w)
				}
			}
		})
	}
}

const yamlBomb = `a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
`

func TestParseAnchorsAllowed(t *testing.T) {
	in := "limits: &l {pids: 32}\nenv: {inherit: &i [TZ]}\n"
	if _, err := Parse([]byte(in)); err != nil {
		t.Errorf("Parse(%q) error = %v, want nil (small anchors are fine)", in, err)
	}
}

func TestParseSizeCase(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"64000", 64000, false},
		{"0", 0, false},
		{"1Ki", 1024, false},
		{"256Mi", 256 << 20, false},
		{"1Gi", 1 << 30, false},
		{"2Ti", 2 << 40, false},
		{"32k", 32000, false},
		{"10M", 10e6, false},
		{"3G", 3e9, false},
		{"1T", 1e12, false},
		{"8388607Ti", 8388607 << 40, false},
		{"8388608Ti", 0, true},
		{"9223372036854775807", 9223372036854775807, false},
		{"9223372036854775808", 0, true},
		{"", 0, true},
		{"Gi", 0, true},
		{"1.5Gi", 0, true},
		{"-1", 0, true},
		{"+1", 0, true},
		{"1 Gi", 0, true},
		{"1GB", 0, true},
		{"1gi", 0, true},
		{"1e9", 0, true},
		{"lots", 0, true},
	}
	for _, tt := range tests {
		got, err := parseSize(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseSize(%q) = %d, %v, want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestFormatSizeCase(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0"}, {1, "1"}, {1024, "1Ki"}, {1536, "1536"}, {64000, "64000"},
		{64 << 20, "64Mi"}, {1 << 30, "1Gi"}, {4 << 40, "4Ti"}, {1 << 50, "1024Ti"},
	}
	for _, tt := range tests {
		if got := formatSize(tt.in); got != tt.want {
			t.Errorf("formatSize(%d) = %q, want %q", tt.in, got, tt.want)
		}
		if back, err := parseSize(formatSize(tt.in)); err != nil || back != tt.in {
			t.Errorf("parseSize(formatSize(%d)) = %d, %v, want %d", tt.in, back, err, tt.in)
		}
	}
}

func TestBuiltinCase(t *testing.T) {
	tests := []struct {
		name      string
		workspace sandbox.WorkspaceMode
		memory    int64
		cpus      float64
		pids      int64
		timeout   int64
	}{
		{ReadOnly, "ro", 1 << 30, 1, 256, 120000},
		{WorkspaceWrite, "rw", 1 << 30, 1, 256, 120000},
		{CI, "rw", 4 << 30, 2, 1024, 600000},
	}
	for _, tt := range tests {
		p, ok := Builtin(tt.name)
		if !ok {
			t.Fatalf("Builtin(%q) = _, false, want true", tt.name)
		}
		l := p.Limits
		if p.Name != tt.name || p.Workspace != tt.workspace || l.MemoryBytes != tt.memory || l.CPUs != tt.cpus || l.Pids != tt.pids || l.TimeoutMs != tt.timeout {
			t.Errorf("Builtin(%q) = %+v, want workspace %s memory %d cpus %v pids %d timeout %d", tt.name, p, tt.workspace, tt.memory, tt.cpus, tt.pids, tt.timeout)
		}
		if p.Backend != "oci" || p.Transcript != "ro" || p.Network != "none" || p.User != "auto" {
			t.Errorf("Builtin(%q) = %+v, want backend oci, transcript ro, network none, user auto", tt.name, p)
		}
		if err := Validate(p); err != nil {
			t.Errorf("Validate(Builtin(%q)) = %v, want nil", tt.name, err)
		}
		n, err := Normalize(p)
		if err != nil || !reflect.DeepEqual(n, p) {
			t.Errorf("Normalize(Builtin(%q)) = %+v, %v, want it unchanged", tt.name, n, err)
		}
	}
	if _, ok := Builtin("local"); ok {
		t.Errorf("Builtin(%q) = _, true, want false", "local")
	}
	a, _ := Builtin(CI)
	a.EnvInherit[0] = "CHANGED"
	if b, _ := Builtin(CI); b.EnvInherit[0] == "CHANGED" {
		t.Errorf("Builtin(%q) shares state between calls", CI)
	}
}

func TestLoadCase(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	strict := write("strict.yaml", "workspace: ro\n")
	named := write("other.yml", "name: given\n")
	js := write("p.JSON", `{"network": "loopback"}`)
	odd := write("my policy.yaml", "{}")
	bad := write("bad.yaml", "limits: {pids: -1}\n")
	txt := write("p.txt", "{}")
	huge := write("huge.yaml", strings.Repeat("#", MaxFileSize+1))
	if err := os.Mkdir(filepath.Join(dir, "d.yaml"), 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(strict, link); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		arg      string
		wantName string
		wantErr  string
	}{
		{"ci", "ci", ""},
		{"read-only", "read-only", ""},
		{"workspace-write", "workspace-write", ""},
		{strict, "strict", ""},
		{named, "given", ""},
		{js, "p", ""},
		{odd, "custom", ""},
		{"nope", "", `"nope" is neither a built-in profile (ci, read-only, workspace-write) nor a .yaml`},
		{txt, "", "nor a .yaml, .yml or .json file"},
		{bad, "", "policy file " + bad + ": limits.pids: -1 is not allowed"},
		{filepath.Join(dir, "missing.yaml"), "", "no such file"},
		{filepath.Join(dir, "d.yaml"), "", "is a directory, not a regular file"},
		{huge, "", "larger than the limit of 1048576"},
		{fifo, "", "is a FIFO, not a regular file"},
		{link, "", "is a symbolic link"},
	}
	for _, tt := range tests {
		p, err := Load(tt.arg)
		if tt.wantErr == "" {
			if err != nil || p.Name != tt.wantName {
				t.Errorf("Load(%q) = %q, %v, want %q, nil", tt.arg, p.Name, err, tt.wantName)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Load(%q) error = %v, want an invalid-argument error containing %q", tt.arg, err, tt.wantErr)
		}
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) error = %v, want it to wrap fs.ErrNotExist", err)
	}
	p, err := Load(strict)
	if err != nil || p.Workspace != "ro" {
		t.Errorf("Load(%q) = %+v, %v, want workspace ro", strict, p, err)
	}
}

func TestLocalBackendOnlyExplicit(t *testing.T) {
	for _, name := range Builtins() {
		if p, _ := Builtin(name); p.Backend == "local" {
			t.Errorf("Builtin(%q).Backend = local, want a container backend", name)
		}
	}
	p, err := Parse([]byte("backend: local"))
	if err != nil || p.Backend != "local" {
		t.Errorf("Parse(backend: local) = %+v, %v, want backend local", p, err)
	}
}

func TestNormalizeCase(t *testing.T) {
	base, _ := Builtin(WorkspaceWrite)
	zero := base
	zero.Limits = sandbox.Limits{}
	zero.Runtime = ""
	zero.Tmpfs = nil
	zero.Digest = "stale"
	got, err := Normalize(zero)
	if err != nil || !reflect.DeepEqual(got, base) {
		t.Errorf("Normalize(zero limits) = %+v, %v, want %+v", got, err, base)
	}
	bad := base
	bad.Limits.Pids = -3
	bad.Mounts = []sandbox.Mount{{Source: "rel", Target: "/x"}}
	if err := Validate(bad); err == nil || !strings.Contains(err.Error(), "limits.pids") || !strings.Contains(err.Error(), "mounts[0].source") {
		t.Errorf("Validate(bad) = %v, want errors naming limits.pids and mounts[0].source", err)
	}
	if err := Validate(sandbox.Policy{}); err == nil {
		t.Errorf("Validate(zero Policy) = nil, want an error")
	}
}

func TestFormatRoundTrip(t *testing.T) {
	for _, in := range []string{"{}", fullYAML, "env: {inherit: []}", "backend: local\nname: dev"} {
		p, err := Parse([]byte(in))
		if err != nil {
			t.Fatalf("Parse(%q) error = %v", in, err)
		}
		out, err := Format(p)
		if err != nil {
			t.Fatalf("Format(%+v) error = %v", p, err)
		}
		back, err := Parse(out)
		if err != nil || !reflect.DeepEqual(back, p) {
			t.Errorf("Parse(Format(Parse(%q))) = %+v, %v, want %+v\n%s", in, back, err, p, out)
		}
	}
}

func TestLoadCheckedCase(t *testing.T) {
	dir := t.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(path string, mode os.FileMode) string {
		if err := os.WriteFile(path, []byte("workspace: ro\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		return path
	}
	outside := write(filepath.Join(dir, "ops.yaml"), 0o644)
	inside := write(filepath.Join(ws, "evil.yaml"), 0o644)
	groupWritable := write(filepath.Join(dir, "gw.yaml"), 0o664)
	fc := FileChecks{OperatorOwned: true, Outside: []safefile.Dir{{What: "the workspace", Path: ws}}}
	tests := []struct {
		arg     string
		wantErr string
	}{
		{"read-only", ""},
		{outside, ""},
		{inside, "lies inside the workspace " + ws},
		{groupWritable, "writable by its group or by others"},
	}
	for _, tt := range tests {
		p, err := LoadChecked(tt.arg, fc)
		if tt.wantErr == "" {
			if err != nil || p.Workspace != "ro" {
				t.Errorf("LoadChecked(%q) = %+v, %v, want workspace ro", tt.arg, p, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("LoadChecked(%q) error = %v, want an invalid-argument error containing %q", tt.arg, err, tt.wantErr)
		}
		if _, err := Load(tt.arg); err != nil {
			t.Errorf("Load(%q) without the operator checks = %v, want the policy", tt.arg, err)
		}
	}
}

func TestParseAllowSecretsCase(t *testing.T) {
	tests := []struct {
		doc     string
		want    []string
		wantErr string
	}{
		{"env: {inherit: [DATABASE_URL, LANG], allowSecrets: [DATABASE_URL]}", []string{"DATABASE_URL"}, ""},
		{"env: {inherit: [GH_PAT, B_DSN], allowSecrets: [GH_PAT, B_DSN]}", []string{"B_DSN", "GH_PAT"}, ""},
		{"env: {inherit: [LANG]}", nil, ""},
		{"env: {inherit: [LANG], allowSecrets: [GH_PAT]}", nil, `env.allowSecrets[0]: "GH_PAT" is not in env.inherit`},
		{"env: {inherit: [GH_PAT], allowSecrets: [GH_PAT, GH_PAT]}", nil, `env.allowSecrets[1]: "GH_PAT" is listed twice`},
		{"env: {inherit: [LD_PRELOAD], allowSecrets: [LD_PRELOAD]}", nil, `env.allowSecrets[0]: "LD_PRELOAD" may not be passed`},
		{"env: {inherit: [LANG], allowSecrets: [DSH_HOME]}", nil, `env.allowSecrets[0]: "DSH_HOME" may not be passed`},
		{"env: {inherit: [LANG], allowSecrets: [\"A B\"]}", nil, `env.allowSecrets[0]: "A B" is not a variable name`},
		{"env: {inherit: [LANG], allowSecrets: LANG}", nil, "env.allowSecrets: is a string; want a list"},
	}
	for _, tt := range tests {
		p, err := Parse([]byte(tt.doc))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, sandbox.ErrInvalid) {
				t.Errorf("Parse(%q) = %v, want an invalid-argument error containing %q", tt.doc, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(p.EnvAllowSecrets, tt.want) {
			t.Errorf("Parse(%q) = allowSecrets %q, %v; want %q", tt.doc, p.EnvAllowSecrets, err, tt.want)
			continue
		}
		// Format writes it back, and explain shows what is passed.
		out, err := Format(p)
		if err != nil {
			t.Fatal(err)
		}
		q, err := Parse(out)
		if err != nil || !reflect.DeepEqual(q.EnvAllowSecrets, p.EnvAllowSecrets) || q.Digest != p.Digest {
			t.Errorf("Parse(Format(%q)) = allowSecrets %q digest %s, %v; want %q digest %s", tt.doc, q.EnvAllowSecrets, q.Digest, err, p.EnvAllowSecrets, p.Digest)
		}
		ex := Explain(p)
		if tt.want != nil && !strings.Contains(ex, "except for "+strings.Join(tt.want, ", ")+", which env.allowSecrets passes anyway") {
			t.Errorf("Explain(%q) does not show env.allowSecrets %q:\n%s", tt.doc, tt.want, ex)
		}
	}
}

// TestFileChecksBackends: a policy file may name exactly the backends its
// reader passes (a program's registry, kubernetes included), and the
// error for another lists them; a resolved policy (Normalize, Plan) needs
// only a backend's name, and an empty or malformed one is refused naming
// the field.
func TestFileChecksBackends(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "k.yaml")
	if err := os.WriteFile(f, []byte("backend: kubernetes\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	registry := []sandbox.Backend{"oci", "kubernetes"}
	if p, err := LoadChecked(f, FileChecks{Backends: registry}); err != nil || p.Backend != "kubernetes" {
		t.Errorf("LoadChecked(backend: kubernetes, Backends %q) = %q, %v; want the policy", registry, p.Backend, err)
	}
	want := `backend: "kubernetes" is not allowed; want one of oci, docker, containerd, local`
	if _, err := LoadChecked(f, FileChecks{}); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), want) {
		t.Errorf("LoadChecked(backend: kubernetes, no Backends) = %v, want an error containing %q", err, want)
	}
	want = `backend: "kubernetes" is not allowed; want one of oci, docker`
	if _, err := LoadChecked(f, FileChecks{Backends: []sandbox.Backend{"oci", "docker"}}); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("LoadChecked(backend: kubernetes, Backends oci, docker) = %v, want an error containing %q", err, want)
	}
	base, _ := Builtin(WorkspaceWrite)
	base.Backend = "kubernetes"
	if _, err := Normalize(base); err != nil {
		t.Errorf("Normalize(backend kubernetes) = %v, want it accepted", err)
	}
	for _, b := range []sandbox.Backend{"", "../oci", "a b"} {
		base.Backend = b
		if _, err := Normalize(base); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "backend: ") {
			t.Errorf("Normalize(backend %q) = %v, want an invalid-argument error naming backend", b, err)
		}
	}
}
