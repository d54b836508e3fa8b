package oci

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// runscProc is a host process of a gVisor sandbox: its argv[0] (runsc
// names its gofer "runsc-gofer" and its Sentry "runsc-sandbox") and its
// real, effective, saved and file-system uids.
type runscProc struct {
	name string
	uids []uint64
}

// runscProcs lists the gofer and Sentry processes of the container whose
// bundle is dir.
func runscProcs(t *testing.T, dir string) []runscProc {
	t.Helper()
	var out []runscProc
	entries, _ := os.ReadDir("/proc")
	for _, ent := range entries {
		data, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(data), "\x00")
		if len(args) == 0 || (args[0] != "runsc-gofer" && args[0] != "runsc-sandbox") {
			continue
		}
		if !strings.Contains(string(data), "--bundle="+dir+"\x00") && !strings.Contains(string(data), "--bundle\x00"+dir+"\x00") {
			continue
		}
		p := runscProc{name: args[0]}
		f, err := os.Open(filepath.Join("/proc", ent.Name(), "status"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
				for _, v := range strings.Fields(rest) {
					n, err := strconv.ParseUint(v, 10, 32)
					if err != nil {
						t.Fatalf("/proc/%s/status Uid %q: %v", ent.Name(), rest, err)
					}
					p.uids = append(p.uids, n)
				}
			}
		}
		f.Close()
		out = append(out, p)
	}
	return out
}

// goferProbe writes files into the workspace, tries a setuid and a plain
// chmod, reads the transcript and tries to write it.
const goferProbe = `echo x > by-call
echo x > suid
if chmod 4755 suid 2>/dev/null; then echo chmod-suid=1; else echo chmod-suid=0; fi
echo x > plain
if chmod 755 plain; then echo chmod-plain=1; else echo chmod-plain=0; fi
if cat "$TR/session.jsonl" >/dev/null 2>&1; then echo transcript-read=1; else echo transcript-read=0; fi
if echo x >> "$TR/session.jsonl" 2>/dev/null; then echo transcript-write=1; else echo transcript-write=0; fi
echo uid=$(id -u)`

// TestRunscUserNamespace: under runsc a call runs in the spec's user
// namespace, so gVisor's gofer (which makes the call's files on the
// host) and its Sentry are never host uid 0, also for a root-owned
// workspace, whose files the call still creates as root through an
// id-mapped mount, without setuid bits. The workspace and the session
// directory lie below directories others may not search, which the
// gofer reaches only through the bundle's staging mounts; the staging
// mounts of read-only binds are read-only. The legitimate variants: a
// uid-1000 workspace gets files of uid 1000 and a gofer of host uid
// 2^31, and a policy that says user: host-root explicitly gets a gofer
// of host uid 0.
func TestRunscUserNamespace(t *testing.T) {
	e := newTestExecutor(t, RuntimeRunsc)
	for _, c := range []struct {
		name      string
		user      sandbox.User
		owner     int
		goferUID  uint64
		wantFiles int
	}{
		{"root-owned", "auto", 0, uint64(policy.MappedIDBase), 0},
		{"uid-1000", "auto", 1000, uint64(policy.MappedIDBase), 1000},
		{"host-root", policy.UserHostRoot, 0, 0, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			// t.TempDir is 0700 root: nobody else may search it.
			ws := filepath.Join(t.TempDir(), "ws")
			tr := filepath.Join(t.TempDir(), "sessions", "s")
			for _, d := range []string{ws, tr} {
				if err := os.MkdirAll(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(tr, "session.jsonl"), []byte("{}\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{ws, tr, filepath.Join(tr, "session.jsonl")} {
				if err := os.Chown(p, c.owner, c.owner); err != nil {
					t.Fatal(err)
				}
			}
			p := testPolicy(t, RuntimeRunsc)
			p.User = c.user
			req := &sandbox.Request{
				Command: goferProbe + "\nsleep 1",
				Env:     []string{"TR=" + tr},
				Policy:  p,
				Session: sandbox.Session{ID: "s", Cwd: ws, TranscriptDir: tr,
					Owner: sandbox.Owner{UID: uint32(c.owner), GID: uint32(c.owner), Set: true}},
			}
			var procs []runscProc
			var roStaged, rwStaged int
			e.inject = func(step string) error {
				if step != "started" {
					return nil
				}
				waitForPidFile(t, e)
				dirs, _ := filepath.Glob(filepath.Join(e.bundlesDir(), "*"))
				if len(dirs) != 1 {
					return fmt.Errorf("bundles %q, want one", dirs)
				}
				procs = runscProcs(t, dirs[0])
				roStaged, rwStaged = stagedModes(t, dirs[0])
				return nil
			}
			defer func() { e.inject = nil }()
			res, err := e.Run(context.Background(), req)
			if err != nil || sandbox.ExitCode(res, nil) != 0 {
				t.Fatalf("Run = %+v, %v", res, err)
			}
			got := map[string]string{}
			for _, line := range strings.Split(strings.TrimSpace(res.Stdout.Text), "\n") {
				k, v, _ := strings.Cut(line, "=")
				got[k] = v
			}
			want := map[string]string{"uid": fmt.Sprint(c.owner), "chmod-plain": "1", "transcript-read": "1", "transcript-write": "0",
				"chmod-suid": map[bool]string{true: "0", false: "1"}[c.owner == 0 && c.user != policy.UserHostRoot]}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %q inside, want %q (stdout %q, stderr %q)", k, got[k], v, res.Stdout.Text, res.Stderr.Text)
				}
			}

			names := map[string]bool{}
			for _, pr := range procs {
				names[pr.name] = true
				for _, u := range pr.uids {
					switch {
					case pr.name == "runsc-sandbox" && u == 0:
						t.Errorf("the Sentry runs with host uid 0 (uids %v)", pr.uids)
					case pr.name == "runsc-gofer" && u != c.goferUID:
						t.Errorf("the gofer runs with host uids %v, want %d", pr.uids, c.goferUID)
					}
				}
			}
			if !names["runsc-gofer"] || !names["runsc-sandbox"] {
				t.Errorf("found runsc processes %+v, want a gofer and a Sentry", procs)
			}
			if c.user != policy.UserHostRoot && (roStaged == 0 || rwStaged != 1) {
				// Read-write: the workspace only.
				t.Errorf("staging mounts: %d read-only, %d read-write; want the read-only binds read-only and only the workspace writable", roStaged, rwStaged)
			}

			for _, name := range []string{"by-call", "plain", "suid"} {
				fi, err := os.Lstat(filepath.Join(ws, name))
				if err != nil {
					t.Fatal(err)
				}
				uid, _, _ := ownerOf(fi)
				if uid != c.wantFiles {
					t.Errorf("%s the call created is owned by uid %d on the host, want %d", name, uid, c.wantFiles)
				}
				if name == "suid" && fi.Mode()&os.ModeSetuid != 0 && uid == 0 && c.user != policy.UserHostRoot {
					t.Errorf("the call left a setuid-root file on the host (%v)", fi.Mode())
				}
			}
			if left := leftovers(t, e); len(left) > 0 {
				t.Errorf("left behind: %q", left)
			}
		})
	}
}

// stagedModes counts the staging mounts of the bundle in dir by whether
// they are read-only.
func stagedModes(t *testing.T, dir string) (ro, rw int) {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		mp := unescapeMountinfo(f[4])
		if filepath.Dir(mp) != filepath.Join(dir, bundleBinds) {
			continue
		}
		if strings.HasPrefix(f[5], "ro") {
			ro++
		} else {
			rw++
		}
	}
	return ro, rw
}

// ownerOf is the host uid and gid of fi.
func ownerOf(fi os.FileInfo) (int, int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return -1, -1, false
	}
	return int(st.Uid), int(st.Gid), true
}

func TestGoferMountPointsCase(t *testing.T) {
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc"},
		{Destination: "/tmp", Type: "tmpfs"},
		{Destination: "/etc", Type: "bind"},
		{Destination: "/tmp/ws", Type: "bind"},
	}
	kept := []string{"/proc", "/etc", "/tmp/ws"}
	for _, c := range []struct {
		cwd  string
		want []string
	}{
		{"", kept},
		{"/", kept},       // every mount lies below it
		{"/tmp", kept},    // /tmp/ws makes it
		{"/tmp/ws", kept}, // the workspace's own mount point
		{"/tmp/ws/sub", append(kept, "/tmp/ws/sub")}, // inside a bind: mountPoints skips it
		{"/srv/app", append(kept, "/srv/app")},
		{"relative", kept},
	} {
		spec := &specs.Spec{Mounts: mounts}
		if c.cwd != "" {
			spec.Process = &specs.Process{Cwd: c.cwd}
		}
		var got []string
		for _, m := range goferMountPoints(spec) {
			got = append(got, m.Destination)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("goferMountPoints(cwd %q) = %q, want %q", c.cwd, got, c.want)
		}
		if len(spec.Mounts) != len(mounts) || spec.Mounts[1].Type != "tmpfs" {
			t.Errorf("goferMountPoints(cwd %q) changed the spec's mounts to %+v", c.cwd, spec.Mounts)
		}
	}
}

// TestRunscNosuidStateDir runs root-owned calls under runsc with the
// state directory on a nosuid, nodev tmpfs, as the default /run is on
// most hosts: gVisor's gofer, in the call's user namespace, could not
// remount such a root read-only (its flags are locked there), so the
// executor makes the root read-only itself. Both kinds of root run, and
// both stay read-only to the call.
func TestRunscNosuidStateDir(t *testing.T) {
	requireRuntime(t, RuntimeRunsc)
	store := busyboxStore(t)
	run := filepath.Join(testStateDir(t), "run")
	if err := os.Mkdir(run, 0o711); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", run, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0711"); err != nil {
		t.Fatalf("mount a nosuid tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(run, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", run, err)
		}
	})
	e, err := New(Options{Runtime: RuntimeRunsc, Service: driver.Service{StateDir: filepath.Join(run, "dsh-sandbox"), Logger: testLogger(t)}, Images: store})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	for _, image := range []string{"host", "busybox"} {
		p := testPolicy(t, RuntimeRunsc)
		p.Image = image
		ws := t.TempDir()
		res, err := e.Run(context.Background(), &sandbox.Request{
			Command: "echo x > by-call; if touch /x 2>/dev/null; then echo root-writable; else echo root-ro; fi",
			Session: sandbox.Session{ID: "s", Cwd: ws},
			Policy:  p,
		})
		if err != nil || sandbox.ExitCode(res, nil) != 0 || res.Stdout.Text != "root-ro\n" {
			t.Fatalf("image %s: Run = %+v, %v; want exit 0 and root-ro", image, res, err)
		}
		if fi, err := os.Stat(filepath.Join(ws, "by-call")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 0 {
			t.Errorf("image %s: by-call on the host: %v, %v; want a file of root", image, fi, err)
		}
	}
	if left := leftovers(t, e); len(left) > 0 {
		t.Errorf("left behind: %q", left)
	}
}
