package containerd

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/idmap"
)

// usernsScript prints the call's uid map, its uid, and whether a plain
// and a set-user-ID chmod of files it creates in the workspace work.
const usernsScript = `cat /proc/self/uid_map
echo "uid=$(id -u)"
touch plain suid
if chmod 755 plain 2>/dev/null; then echo plain=1; else echo plain=0; fi
if chmod 4755 suid 2>/dev/null; then echo suid=1; else echo suid=0; fi`

// usernsCall runs usernsScript for a workspace owned by owner under p
// and returns the host uids the call's uid map maps to, and its
// key=value lines.
func usernsCall(t *testing.T, e *Executor, p sandbox.Policy, owner int) (string, []uint64, map[string]string) {
	t.Helper()
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, owner, owner); err != nil {
		t.Fatal(err)
	}
	res, err := e.Run(t.Context(), &sandbox.Request{Command: usernsScript, Session: sandbox.Session{Cwd: ws}, Policy: p})
	if err != nil {
		t.Fatalf("Run() = %v", err)
	}
	if res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("Run() exit %v, stdout %q, stderr %q", res.ExitCode, res.Stdout.Text, res.Stderr.Text)
	}
	var hosts []uint64
	kv := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout.Text), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			kv[k] = v
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("uid_map line %q", line)
		}
		h, err := strconv.ParseUint(f[1], 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, h)
	}
	return ws, hosts, kv
}

// TestUserNamespaceCases: a call of a root-owned workspace runs as
// container root in a user namespace that never maps to host uid 0, yet
// writes the workspace with root-owned files (an id-mapped staging
// mount) and cannot make one setuid, while a plain chmod works; a
// uid-1000 workspace's call gets files owned by 1000; a policy that says
// user: host-root does run as host uid 0. No mount or call directory
// remains after the calls.
func TestUserNamespaceCases(t *testing.T) {
	e := newTestExecutor(t)
	for _, owner := range []int{0, 1000} {
		t.Run("uid-"+strconv.Itoa(owner), func(t *testing.T) {
			ws, hosts, kv := usernsCall(t, e, testPolicy(t), owner)
			if len(hosts) == 0 || slices.Contains(hosts, 0) {
				t.Errorf("uid_map host uids = %v, want some and never 0", hosts)
			}
			if kv["uid"] != strconv.Itoa(owner) {
				t.Errorf("uid inside = %s, want %d", kv["uid"], owner)
			}
			for _, name := range []string{"plain", "suid"} {
				var st unix.Stat_t
				if err := unix.Lstat(filepath.Join(ws, name), &st); err != nil {
					t.Fatal(err)
				}
				if int(st.Uid) != owner {
					t.Errorf("%s the call created is owned by uid %d on the host, want %d", name, st.Uid, owner)
				}
				if name == "suid" && st.Mode&syscall.S_ISUID != 0 && st.Uid == 0 {
					t.Errorf("the call left a setuid-root file on the host (mode %o)", st.Mode)
				}
			}
			if kv["plain"] != "1" {
				t.Errorf("chmod 755 inside = %s, want it to work", kv["plain"])
			}
			if owner == 0 && kv["suid"] != "0" {
				t.Errorf("chmod 4755 of a root-owned file inside = %s, want it refused", kv["suid"])
			}
		})
	}
	t.Run("host-root", func(t *testing.T) {
		p := testPolicy(t)
		p.User = policy.UserHostRoot
		_, hosts, kv := usernsCall(t, e, p, 0)
		if kv["uid"] != "0" || !slices.Contains(hosts, 0) {
			t.Errorf("user: host-root: uid %s, uid_map host uids %v; want uid 0 mapped to host 0", kv["uid"], hosts)
		}
	})
	if l := leftovers(t, e); len(l) != 0 {
		t.Errorf("leftovers after the calls: %q", l)
	}
}

// TestReapCallMountsCases: the call directories of a dead instance on
// the same state directory, with what is mounted in them, are removed by
// Reap and reported; those of a live instance stay.
func TestReapCallMountsCases(t *testing.T) {
	e := newTestExecutor(t)
	var insts [2]*Executor
	var dirs [2]string
	for i := range insts {
		x, err := New(t.Context(), Options{Address: e.opts.Address, Namespace: e.opts.Namespace, Service: driver.Service{StateDir: e.opts.StateDir}})
		if err != nil {
			t.Fatalf("New(instance %d) = %v", i, err)
		}
		insts[i] = x
		dir, err := x.makeCallDir("call-" + x.instance)
		if err != nil {
			t.Fatal(err)
		}
		dirs[i] = dir
		src := t.TempDir()
		target := filepath.Join(dir, "0")
		if err := os.Mkdir(target, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = idmap.RemoveCallDir(dir, []string{target}) })
	}
	dead, live := insts[0], insts[1]
	defer live.Close()
	die(dead)

	rep, err := e.Reap(t.Context())
	if err != nil {
		t.Errorf("Reap() = %v", err)
	}
	if !slices.Contains(rep.Mounts, "call-"+dead.instance) || slices.Contains(rep.Mounts, "call-"+live.instance) {
		t.Errorf("Reap() = %+v, want call mounts of %s and not of %s", rep, dead.instance, live.instance)
	}
	if _, err := os.Stat(filepath.Dir(dirs[0])); !os.IsNotExist(err) {
		t.Errorf("the dead instance's call directories after Reap(): stat = %v, want not exist", err)
	}
	if m := mountsBelow(t, dirs[0]); len(m) != 0 {
		t.Errorf("mounts of the dead instance after Reap() = %q", m)
	}
	if m := mountsBelow(t, dirs[1]); len(m) != 1 {
		t.Errorf("mounts of the live instance after Reap() = %q, want its one mount kept", m)
	}
}

// BenchmarkUserNamespace measures whole calls of `true`, the three
// kinds taking turns in each iteration: user: host-root (no user
// namespace), a uid-1000 workspace (user namespace; the snapshot mounted
// by the executor) and a root-owned workspace (plus id-mapped staging
// mounts of the workspace and session directory). With
// -benchtime=30x or more it reports each kind's median in ms.
func BenchmarkUserNamespace(b *testing.B) {
	e := newTestExecutor(b)
	kinds := []string{"host-root", "userns", "userns-idmap"}
	reqs := map[string]*sandbox.Request{}
	for _, k := range kinds {
		owner, user := 0, sandbox.UserAuto
		switch k {
		case "host-root":
			user = policy.UserHostRoot
		case "userns":
			owner = 1000
		}
		dir := b.TempDir()
		ws := filepath.Join(dir, "ws")
		if err := os.Mkdir(ws, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.Chown(ws, owner, owner); err != nil {
			b.Fatal(err)
		}
		p := testPolicy(b)
		p.User = user
		reqs[k] = &sandbox.Request{Command: "true", Policy: p, Session: sandbox.Session{ID: "s", Cwd: ws, TranscriptDir: filepath.Join(dir, "sessions", "s")}}
	}
	took := map[string][]float64{}
	b.ResetTimer()
	for range b.N {
		for _, k := range kinds {
			start := time.Now()
			res, err := e.Run(b.Context(), reqs[k])
			took[k] = append(took[k], float64(time.Since(start).Microseconds())/1000)
			if err != nil || sandbox.ExitCode(res, nil) != 0 {
				b.Fatalf("%s: Run(true) = %+v, %v", k, res, err)
			}
		}
	}
	b.StopTimer()
	for k, ms := range took {
		slices.Sort(ms)
		b.ReportMetric(ms[len(ms)/2], k+"-median-ms")
	}
}
