package docker

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// fakeAliases knows the user dockremap as uid 102.
func fakeAliases(key string) []string {
	switch key {
	case "dockremap":
		return []string{"dockremap", "102"}
	case "102":
		return []string{"102", "dockremap"}
	}
	return []string{key}
}

func TestRemapFromSubIDsCase(t *testing.T) {
	m := func(c, h, n uint32) specs.LinuxIDMapping {
		return specs.LinuxIDMapping{ContainerID: c, HostID: h, Size: n}
	}
	for _, tc := range []struct {
		name           string
		subuid, subgid string
		want           *remap // nil: an error
	}{
		{"default", "dockremap:100000:65536\n", "dockremap:100000:65536\n",
			&remap{User: "dockremap", UIDs: []specs.LinuxIDMapping{m(0, 100000, 65536)}, GIDs: []specs.LinuxIDMapping{m(0, 100000, 65536)}}},
		{"other users and comments", "# users\nalice:165536:65536\n\ndockremap:100000:65536\n", "alice:165536:65536\ndockremap:100000:65536\n",
			&remap{User: "dockremap", UIDs: []specs.LinuxIDMapping{m(0, 100000, 65536)}, GIDs: []specs.LinuxIDMapping{m(0, 100000, 65536)}}},
		{"two ranges, by name and uid, end to end", "dockremap:100000:1000\nalice:165536:65536\n102:300000:5000\n", "102:100000:6000\n",
			&remap{User: "dockremap", UIDs: []specs.LinuxIDMapping{m(0, 100000, 1000), m(1000, 300000, 5000)}, GIDs: []specs.LinuxIDMapping{m(0, 100000, 6000)}}},
		{"the root's range is not the user's first", "dockremap:50000:10\ndockremap:100000:65536\n", "dockremap:100000:65536\n", nil},
		{"no user starts at the root", "alice:165536:65536\n", "alice:165536:65536\n", nil},
		{"two users start at the root", "dockremap:100000:65536\nbob:100000:65536\n", "dockremap:100000:65536\nbob:100000:65536\n", nil},
		{"gids start elsewhere", "dockremap:100000:65536\n", "dockremap:200000:65536\n", nil},
		{"no gids", "dockremap:100000:65536\n", "", nil},
		{"a range at host id 0", "dockremap:100000:10\ndockremap:0:65536\n", "dockremap:100000:65536\n", nil},
		{"malformed", "dockremap:100000\n", "dockremap:100000:65536\n", nil},
		{"count 0", "dockremap:100000:0\n", "dockremap:100000:65536\n", nil},
		{"overflow", "dockremap:4294967000:65536\n", "dockremap:100000:65536\n", nil},
		{"hostile name", "dockremap:100000:65536:x\n", "dockremap:100000:65536\n", nil},
	} {
		got, err := remapFromSubIDs(100000, 100000, []byte(tc.subuid), []byte(tc.subgid), fakeAliases)
		switch {
		case tc.want == nil && err == nil:
			t.Errorf("%s: remapFromSubIDs(%q, %q) = %v, want an error", tc.name, tc.subuid, tc.subgid, got)
		case tc.want != nil && (err != nil || !reflect.DeepEqual(got, *tc.want)):
			t.Errorf("%s: remapFromSubIDs(%q, %q) = %+v, %v; want %+v", tc.name, tc.subuid, tc.subgid, got, err, *tc.want)
		}
	}
}

func TestRemapRootCase(t *testing.T) {
	for _, tc := range []struct {
		dir      string
		uid, gid uint32
		ok       bool
	}{
		{"/var/lib/docker/100000.100000", 100000, 100000, true},
		{"/tmp/d/docker/root/231072.231073", 231072, 231073, true},
		{"/var/lib/docker", 0, 0, false},
		{"/var/lib/docker/0.0", 0, 0, false},
		{"/var/lib/docker/100000", 0, 0, false},
		{"/var/lib/docker/a.b", 0, 0, false},
		{"/var/lib/docker/99999999999.1", 0, 0, false},
	} {
		uid, gid, err := remapRoot(tc.dir)
		if (err == nil) != tc.ok || uid != tc.uid || gid != tc.gid {
			t.Errorf("remapRoot(%q) = %d, %d, %v; want %d, %d, ok %v", tc.dir, uid, gid, err, tc.uid, tc.gid, tc.ok)
		}
	}
}

// TestDetectRemapOff: an engine without the userns security option does
// not remap, whatever its data root is called; a garbled option list is
// an error.
func TestDetectRemapOff(t *testing.T) {
	r, err := detectRemap([]string{"name=seccomp,profile=default", "name=cgroupns"}, "/var/lib/docker/100000.100000")
	if err != nil || r.enabled() {
		t.Errorf("detectRemap(no userns) = %+v, %v; want no remapping", r, err)
	}
	if _, err := detectRemap([]string{"name=seccomp,profile"}, "/var/lib/docker"); err == nil {
		t.Errorf("detectRemap(garbled options) = nil error, want one")
	}
	if _, err := detectRemap([]string{"name=userns"}, "/var/lib/docker"); err == nil {
		t.Errorf("detectRemap(userns, data root without <uid>.<gid>) = nil error, want one")
	}
}

func TestForCallCase(t *testing.T) {
	on := remap{User: "dockremap",
		UIDs: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}},
		GIDs: []specs.LinuxIDMapping{{ContainerID: 0, HostID: 100000, Size: 65536}}}
	plain, err := policy.DefaultSeccompJSON()
	if err != nil {
		t.Fatal(err)
	}
	noSetid, err := noSetidSeccompJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		r        remap
		user     sandbox.User
		runtime  sandbox.Runtime
		uid, gid uint32
		want     callUser
		err      error
	}{
		{"no remap, uid 0: refused", remap{}, "auto", "", 0, 0, callUser{}, sandbox.ErrUnavailable},
		{"no remap, 0:0 policy: refused", remap{}, "0:0", "", 0, 0, callUser{}, sandbox.ErrUnavailable},
		{"no remap, uid 1000", remap{}, "auto", "", 1000, 1000, callUser{seccomp: plain}, nil},
		{"no remap, host-root", remap{}, policy.UserHostRoot, "", 0, 0, callUser{seccomp: plain}, nil},
		{"remap, uid 0", on, "auto", "runc", 0, 0, callUser{idmapped: true, seccomp: noSetid}, nil},
		{"remap, uid 4321", on, "4321:4321", "", 4321, 4321, callUser{idmapped: true, seccomp: plain}, nil},
		{"remap, host-root", on, policy.UserHostRoot, "", 0, 0, callUser{hostIDs: true, seccomp: plain}, nil},
		{"remap, uid outside the map", on, "70000:70000", "", 70000, 70000, callUser{}, sandbox.ErrInvalid},
		{"remap, gid outside the map", on, "1000:70000", "", 1000, 70000, callUser{}, sandbox.ErrInvalid},
		{"remap, runsc uid 1000: host ids", on, "1000:1001", "runsc", 1000, 1001, callUser{hostIDs: true, seccomp: plain}, nil},
		{"remap, runsc uid 0: refused", on, "auto", "runsc", 0, 0, callUser{}, sandbox.ErrUnavailable},
		{"remap, runsc host-root", on, policy.UserHostRoot, "runsc", 0, 0, callUser{hostIDs: true, seccomp: plain}, nil},
		{"no remap, runsc uid 1000", remap{}, "1000:1001", "runsc", 1000, 1001, callUser{seccomp: plain}, nil},
	} {
		got, err := tc.r.forCall(sandbox.Policy{User: tc.user, Runtime: tc.runtime}, tc.uid, tc.gid)
		if tc.err != nil {
			if !errors.Is(err, tc.err) {
				t.Errorf("%s: forCall(%q, %d:%d) = %+v, %v; want an error wrapping %v", tc.name, tc.user, tc.uid, tc.gid, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%s: forCall(%q, %d:%d) = host root %v, id-mapped %v, setid refused %v, %v; want %v, %v, %v", tc.name, tc.user, tc.uid, tc.gid,
				got.hostIDs, got.idmapped, got.seccomp == noSetid, err, tc.want.hostIDs, tc.want.idmapped, tc.want.seccomp == noSetid)
		}
	}
	if noSetid == plain || !strings.Contains(noSetid, "SCMP_CMP_MASKED_EQ") {
		t.Errorf("the uid-0 profile does not narrow the default one with masked mode checks")
	}
}

// requireRemap fails or skips unless the engine of e remaps user
// namespaces (scripts/daemons.sh starts it with --userns-remap).
func requireRemap(t *testing.T, e *Executor) {
	t.Helper()
	if e.remap.enabled() {
		return
	}
	msg := "the engine does not remap user namespaces (start it with --userns-remap=default, as scripts/daemons.sh does)"
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true but " + msg)
	}
	t.Skip(msg)
}

// ownedWorkspace makes a workspace directory (0755) owned by uid:uid.
func ownedWorkspace(t testing.TB, uid int) string {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, uid, uid); err != nil {
		t.Fatal(err)
	}
	return ws
}

// userNSCommand prints the call's uid map and uid, creates a file and
// tries a setuid chmod in the workspace.
const userNSCommand = `cat /proc/self/uid_map; echo "uid=$(id -u)"; echo x > by-call
if chmod 4755 by-call 2>/dev/null; then echo suid=1; else echo suid=0; fi`

// TestRunUserNamespace: on an engine that remaps, a call of a root-owned
// workspace and one of a uid-1000 workspace run as unprivileged host uids
// (the engine's map), and the files they create belong on the host to
// the workspace owner (the binds are id-mapped); the root call cannot
// make a setuid file. user: host-root runs as host uid 0.
func TestRunUserNamespace(t *testing.T) {
	e := newTestExecutor(t)
	requireRemap(t, e)
	base := e.remap.UIDs[0].HostID
	for _, tc := range []struct {
		name     string
		owner    int
		user     sandbox.User
		hostUID  uint32
		suid     string
		fileUID  uint32
		mapFirst string
	}{
		{"root workspace", 0, "auto", base, "0", 0, fmt.Sprintf("0 %d", base)},
		{"uid 1000 workspace", 1000, "auto", base + 1000, "1", 1000, fmt.Sprintf("0 %d", base)},
		{"host-root", 0, policy.UserHostRoot, 0, "1", 0, "0 0 4294967295"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := ownedWorkspace(t, tc.owner)
			p := testPolicy(t)
			p.User = tc.user
			res, err := e.Run(t.Context(), &sandbox.Request{Command: userNSCommand, Session: sandbox.Session{Cwd: ws}, Policy: p})
			if err != nil || sandbox.ExitCode(res, nil) != 0 {
				t.Fatalf("Run(%q) = %+v, %v; want exit 0", userNSCommand, res, err)
			}
			lines := strings.Split(strings.TrimSpace(res.Stdout.Text), "\n")
			if len(lines) != 3 || !strings.HasPrefix(strings.Join(strings.Fields(lines[0]), " "), tc.mapFirst) {
				t.Fatalf("Run(%q) stdout = %q, want a uid map starting %q, uid= and suid=", userNSCommand, res.Stdout.Text, tc.mapFirst)
			}
			if want := fmt.Sprintf("uid=%d", tc.owner); lines[1] != want {
				t.Errorf("uid inside = %q, want %q", lines[1], want)
			}
			var inside, outside, count uint32
			if _, err := fmt.Sscan(lines[0], &inside, &outside, &count); err != nil || outside+uint32(tc.owner)-inside != tc.hostUID {
				t.Errorf("uid map %q maps the call's uid %d to host %d (%v), want %d", lines[0], tc.owner, outside+uint32(tc.owner)-inside, err, tc.hostUID)
			}
			if lines[2] != "suid="+tc.suid {
				t.Errorf("chmod 4755 inside: %q, want suid=%s", lines[2], tc.suid)
			}
			fi, err := os.Lstat(filepath.Join(ws, "by-call"))
			if err != nil {
				t.Fatal(err)
			}
			if uid := fi.Sys().(*syscall.Stat_t).Uid; uid != tc.fileUID {
				t.Errorf("the file the call created is owned by uid %d on the host, want the workspace owner %d", uid, tc.fileUID)
			}
			if fi.Mode()&os.ModeSetuid != 0 && tc.suid == "0" {
				t.Errorf("the call left a setuid file on the host (%v)", fi.Mode())
			}
		})
	}
}

// TestRunRefusesRootWithoutRemap: on an engine that does not remap user
// namespaces (a private one started without --userns-remap), a call of a
// root-owned workspace would be host root: it is refused as unavailable,
// naming the fix, and no container is made; a uid-1000 call runs as
// before, and so does user: host-root, as host uid 0.
func TestRunRefusesRootWithoutRemap(t *testing.T) {
	d := startPrivateEngine(t, "DSH_SANDBOX_DOCKER_USERNS_REMAP=none")
	e, err := New(t.Context(), Options{Host: d.host, Service: driver.Service{StateDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))}})
	if err != nil {
		t.Fatalf("New(private engine) = %v", err)
	}
	defer e.Close()
	if e.remap.enabled() {
		t.Fatalf("the private engine started with DSH_SANDBOX_DOCKER_USERNS_REMAP=none remaps: %v", e.remap)
	}
	var tar bytes.Buffer
	if err := testRootfsTar(&tar); err != nil {
		t.Fatalf("the busybox test image: %v (install busybox-static and bash)", err)
	}
	if err := e.ImportRootfs(t.Context(), &tar, testImage, testImageEnv); err != nil {
		t.Fatalf("ImportRootfs(%q) = %v", testImage, err)
	}
	ws := t.TempDir() // root's
	req := &sandbox.Request{Command: "echo ran", Session: sandbox.Session{Cwd: ws}, Policy: testPolicy(t)}
	res, err := e.Run(t.Context(), req)
	if !errors.Is(err, sandbox.ErrUnavailable) || res != nil {
		t.Fatalf("Run(root-owned workspace) = %+v, %v; want nil, an error wrapping %v", res, err, sandbox.ErrUnavailable)
	}
	for _, want := range []string{"host uid 0", "--userns-remap", "host-root"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run(root-owned workspace): error %q does not mention %q", err, want)
		}
	}
	if left := leftovers(t, e); len(left) != 0 {
		t.Errorf("after the refused call: %v, want none", left)
	}
	for _, user := range []sandbox.User{"1000:1000", policy.UserHostRoot} {
		p := testPolicy(t)
		p.User = user
		req := &sandbox.Request{Command: `head -1 /proc/self/uid_map; id -u`, Session: sandbox.Session{Cwd: ws}, Policy: p}
		res, err := e.Run(t.Context(), req)
		if err != nil || sandbox.ExitCode(res, nil) != 0 {
			t.Fatalf("Run(user %s) = %+v, %v; want exit 0", user, res, err)
		}
		uid := map[sandbox.User]string{"1000:1000": "1000", policy.UserHostRoot: "0"}[user]
		if got := strings.Fields(res.Stdout.Text); len(got) != 4 || got[0] != "0" || got[1] != "0" || got[3] != uid {
			t.Errorf("Run(user %s) stdout = %q, want the host's map (0 0 4294967295) and uid %s", user, res.Stdout.Text, uid)
		}
	}
}

// BenchmarkUserNamespace interleaves whole calls of `true` on an engine
// that remaps: user: host-root (the host's ids, plain binds), a uid-1000
// workspace and a root-owned one (the engine's user namespace and
// id-mapped binds), and reports the median of each in milliseconds.
func BenchmarkUserNamespace(b *testing.B) {
	e := newTestExecutor(b)
	if !e.remap.enabled() {
		b.Skip("the engine does not remap user namespaces (scripts/daemons.sh starts one that does)")
	}
	variants := []struct {
		name  string
		owner int
		user  sandbox.User
	}{{"host-root", 0, policy.UserHostRoot}, {"userns-uid1000", 1000, "auto"}, {"userns-root", 0, "auto"}}
	reqs := map[string]*sandbox.Request{}
	for _, v := range variants {
		p := testPolicy(b)
		p.User = v.user
		dir := b.TempDir()
		reqs[v.name] = &sandbox.Request{Command: "true", Policy: p, Session: sandbox.Session{ID: "s", Cwd: ownedWorkspace(b, v.owner), TranscriptDir: filepath.Join(dir, "sessions", "s")}}
	}
	took := map[string][]time.Duration{}
	for b.Loop() {
		for _, v := range variants {
			start := time.Now()
			res, err := e.Run(b.Context(), reqs[v.name])
			took[v.name] = append(took[v.name], time.Since(start))
			if err != nil || sandbox.ExitCode(res, nil) != 0 {
				b.Fatalf("%s: Run(true) = %+v, %v", v.name, res, err)
			}
		}
	}
	for k, ds := range took {
		b.ReportMetric(medianMs(ds), k+"-median-ms")
	}
}
