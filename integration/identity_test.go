//go:build integration

package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/acl"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/hostpath"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// The identity tests serve as root and send every call from a harness
// client running as the workspace owner (exec --server with the child's
// credentials set), so the service sees that uid through SO_PEERCRED and
// gives it the session directory (DESIGN §3.8 identity, docs/identity.md).

// idBackend is one backend of the identity matrix.
type idBackend struct{ name, backend, runtime string }

var idBackends = []idBackend{
	{"oci-runc", "oci", "runc"},
	{"oci-crun", "oci", "crun"},
	{"oci-runsc", "oci", "runsc"},
	{"docker", "docker", ""},
	{"containerd", "containerd", ""},
}

// idImage is the image every backend runs (busybox and bash).
const idImage = "dsh-itest-busybox:1"

// idWorld is one service (as root) that knows a policy file per backend
// and profile, on a socket every test uid may reach.
type idWorld struct {
	e        env
	base     string
	sock     string
	bin      string            // the binary, where every test uid may run it
	policies map[string]string // "<backend>-<rw|ro>[-<user>]" → the name of a policy the service loads from a file
}

func newIDWorld(t *testing.T) *idWorld {
	t.Helper()
	requireDaemons(t)
	e := newEnv(t)
	importEverywhere(t, e, testImageTar(t), idImage)
	w := &idWorld{e: e, base: filepath.Dir(e.home), policies: map[string]string{}}
	// The test's temporary directories are 0700 root: let the harness
	// uids traverse them (and list nothing).
	for _, d := range []string{filepath.Dir(w.base), w.base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	w.bin = filepath.Join(w.base, "dsh-sandbox")
	if err := os.WriteFile(w.bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	polDir := filepath.Join(w.base, "policies")
	if err := os.Mkdir(polDir, 0o755); err != nil {
		t.Fatal(err)
	}
	serveArgs := []string{}
	for _, b := range idBackends {
		for _, v := range []struct{ key, workspace, user string }{
			{b.name + "-rw", "rw", ""},
			{b.name + "-ro", "ro", ""},
			{b.name + "-ro-4321", "ro", "4321:4321"},
			{b.name + "-rw-hostroot", "rw", "host-root"},
		} {
			doc := map[string]any{
				"name": "id-" + v.key, "backend": b.backend, "image": idImage,
				"workspace": v.workspace, "transcript": "ro",
				"limits": map[string]any{"stdoutMaxBytes": 256},
			}
			if b.runtime != "" {
				doc["runtime"] = b.runtime
			}
			if v.user != "" {
				doc["user"] = v.user
			}
			data, err := json.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			file := filepath.Join(polDir, "id-"+v.key+".json")
			if err := os.WriteFile(file, data, 0o644); err != nil {
				t.Fatal(err)
			}
			w.policies[v.key] = "id-" + v.key // exec --server names it; the service has the file
			serveArgs = append(serveArgs, "--policy-file", file)
		}
	}
	sockDir := filepath.Join(w.base, "sock")
	if err := os.Mkdir(sockDir, 0o711); err != nil {
		t.Fatal(err)
	}
	w.sock = filepath.Join(sockDir, "sandbox.sock")
	startServeAt(t, e, w.sock, append(append([]string{"--listen", "unix://" + w.sock}, daemonFlags()...), serveArgs...)...)
	// The operator lets every local user talk to this service.
	if err := os.Chmod(w.sock, 0o666); err != nil {
		t.Fatal(err)
	}
	return w
}

// workspace makes a workspace directory owned by uid.
func (w *idWorld) workspace(t *testing.T, name string, uid int) string {
	t.Helper()
	ws := filepath.Join(w.base, name)
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, uid, uid); err != nil {
		t.Fatal(err)
	}
	return ws
}

// seed writes the transcript of session id in workspace ws as the harness
// uid would: its directories 0700 and the file 0600, all owned by uid.
// It returns the transcript's path and bytes.
func (w *idWorld) seed(t *testing.T, ws, id string, uid int) (string, []byte) {
	t.Helper()
	path, data := w.transcriptDir(t, ws, id, uid)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, uid, uid); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// transcriptDir makes the session directory of session id in workspace
// ws and its parent, 0700 and owned by uid, and returns the path its
// transcript has and the bytes of its header line.
func (w *idWorld) transcriptDir(t *testing.T, ws, id string, uid int) (string, []byte) {
	t.Helper()
	h := session.Header{ID: id, CreatedAt: 1, Cwd: ws}
	path := jsonl.Path(w.e.root, h, jsonl.CompressionZstd)
	line, err := h.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Dir(filepath.Dir(path)), filepath.Dir(path)} {
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	return path, append(line, '\n')
}

// callAs sends command to the service as a harness client running as
// uid:uid, for session id in workspace ws under the service's policy pol, and
// returns the call's result.
func (w *idWorld) callAs(t *testing.T, uid int, ws, id, pol string, env []string, command string) *sandbox.Result {
	t.Helper()
	args := []string{"exec", "--server", "unix://" + w.sock, "--json", "--policy", pol,
		"--home", w.e.home, "--sessions-root", w.e.root, "--cwd", ws, "--session-id", id}
	for _, kv := range env {
		args = append(args, "--env", kv)
	}
	cmd := exec.Command(w.bin, append(args, "--", command)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=/tmp"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("exec --server as uid %d: %v", uid, err)
	}
	var res sandbox.Result
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		t.Fatalf("exec --server as uid %d: %v; stdout %q, stderr %q", uid, err, out, stderr.String())
	}
	if res.Sandbox.Backend == "" {
		t.Fatalf("exec --server as uid %d: no call ran: %v; stdout %q, stderr %q", uid, err, out, stderr.String())
	}
	return &res
}

// owned is path's uid and gid on the host, and its permission bits.
func owned(t *testing.T, path string) (int, int, os.FileMode) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return int(st.Uid), int(st.Gid), fi.Mode().Perm()
}

// probeScript prints NAME=1 or NAME=0 for each access it tries, then the
// call's uid and the host uid /proc/self/uid_map maps it to.
const probeScript = `c() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "$n=1"; else echo "$n=0"; fi; }
c transcript-read cat "$DSH_SESSION_JSONL"
c dir-list ls "$(dirname "$DSH_SESSION_JSONL")"
c spill-read cat "$SPILL"
c transcript-write sh -c 'echo x >> "$DSH_SESSION_JSONL"'
c spill-write sh -c 'echo x >> "$SPILL"'
c other-list ls "$OTHER"
c workspace-write touch "$PWD/by-call"
u=$(id -u)
echo "uid=$u"
while read -r in out n; do if [ "$u" -ge "$in" ] && [ "$u" -lt $((in + n)) ]; then echo "hostuid=$((out + u - in))"; fi; done </proc/self/uid_map`

// probe parses probeScript's output.
func probe(t *testing.T, res *sandbox.Result) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout.Text), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	if len(got) != 9 || res.Stdout.Truncated {
		t.Fatalf("probe printed %q (stderr %q), want 9 lines", res.Stdout.Text, res.Stderr.Text)
	}
	return got
}

// spillOf runs a call that outgrows the tail and returns its spill file.
func (w *idWorld) spillOf(t *testing.T, uid int, ws, id, pol string) string {
	t.Helper()
	res := w.callAs(t, uid, ws, id, pol, nil, `head -c 5000 /dev/zero | tr '\0' a`)
	if res.ExitCode == nil || *res.ExitCode != 0 || res.Stdout.SpillPath == "" {
		t.Fatalf("spilling call = %+v; want exit 0 and a spill file", *res)
	}
	if fi, err := os.Stat(res.Stdout.SpillPath); err != nil || fi.Size() != 5000 {
		t.Fatalf("spill file %s: %v, %v; want 5000 bytes", res.Stdout.SpillPath, fi, err)
	}
	return res.Stdout.SpillPath
}

func TestIdentityMatrix(t *testing.T) {
	w := newIDWorld(t)
	for _, b := range idBackends {
		for _, owner := range []int{0, 1000, 4321} {
			for _, prof := range []string{"rw", "ro"} {
				t.Run(fmt.Sprintf("%s/uid-%d/%s", b.name, owner, prof), func(t *testing.T) {
					cell := fmt.Sprintf("%s-%d-%s", b.name, owner, prof)
					ws := w.workspace(t, "ws-"+cell, owner)
					id := "s-" + cell
					path, before := w.seed(t, ws, id, owner)
					other, _ := w.seed(t, ws, "other-"+cell, owner)
					pol := w.policies[b.name+"-"+prof]
					spill := w.spillOf(t, owner, ws, id, pol)

					dir := filepath.Dir(path)
					if !hostpath.Within(spill, dir) {
						t.Fatalf("spill file %s is not in the session directory %s", spill, dir)
					}
					for _, p := range []string{dir, filepath.Join(dir, "spill"), spill} {
						if uid, gid, _ := owned(t, p); uid != owner || gid != owner {
							t.Errorf("%s is owned by %d:%d on the host, want the harness %d:%d", p, uid, gid, owner, owner)
						}
					}
					if _, _, perm := owned(t, spill); perm != 0o600 {
						t.Errorf("spill file mode %o, want 0600 (the call runs as the harness uid: no ACL)", perm)
					}

					res := w.callAs(t, owner, ws, id, pol, []string{"SPILL=" + spill, "OTHER=" + filepath.Dir(other)}, probeScript)
					got := probe(t, res)
					want := map[string]string{
						"transcript-read": "1", "dir-list": "1", "spill-read": "1",
						"transcript-write": "0", "spill-write": "0", "other-list": "0",
						"workspace-write": map[string]string{"rw": "1", "ro": "0"}[prof],
						"uid":             fmt.Sprint(owner),
					}
					for k, v := range want {
						if got[k] != v {
							t.Errorf("%s = %s inside, want %s (probe %q)", k, got[k], v, res.Stdout.Text)
						}
					}
					if usernsBackend(b) && (got["hostuid"] == "0" || got["hostuid"] == "") {
						t.Errorf("the call's uid %s is host uid %q in /proc/self/uid_map terms, want an unprivileged one", got["uid"], got["hostuid"])
					}
					created := filepath.Join(ws, "by-call")
					if prof == "rw" {
						if uid, _, _ := owned(t, created); uid != owner {
							t.Errorf("a file the call created is owned by uid %d on the host, want the workspace owner %d", uid, owner)
						}
					} else if _, err := os.Lstat(created); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("read-only workspace: the call created %s (%v)", created, err)
					}
					if after, _ := os.ReadFile(path); string(after) != string(before) {
						t.Errorf("transcript changed to %q", after)
					}
					if fi, err := os.Stat(spill); err != nil || fi.Size() != 5000 {
						t.Errorf("spill file changed: %v, %v", fi, err)
					}
				})
			}
		}
	}
}

// TestIdentityCallReadsThroughACL runs the call as another uid than the
// harness (policy user 4321 for a harness and workspace of uid 1000): it
// reads the session directory, its spill files and the 0600 transcript
// dsh wrote, writes none of them, and cannot list another session: the
// session directory is an id-mapped read-only mount through which the
// harness is the call (docs/identity.md), on every backend.
func TestIdentityCallReadsThroughACL(t *testing.T) {
	w := newIDWorld(t)
	for _, b := range idBackends {
		t.Run(b.name, func(t *testing.T) {
			ws := w.workspace(t, "acl-ws-"+b.name, 1000)
			id := "acl-" + b.name
			path, _ := w.seed(t, ws, id, 1000)
			other, _ := w.seed(t, ws, "acl-other-"+b.name, 1000)
			pol := w.policies[b.name+"-ro-4321"]
			spill := w.spillOf(t, 1000, ws, id, pol)
			if uid, _, perm := owned(t, spill); uid != 1000 || perm != 0o640 {
				t.Errorf("spill file owner %d mode %o, want 1000 and 0640 (0600 plus the ACL mask r--)", uid, perm)
			}
			res := w.callAs(t, 1000, ws, id, pol, []string{"SPILL=" + spill, "OTHER=" + filepath.Dir(other)}, probeScript)
			got := probe(t, res)
			want := map[string]string{
				"transcript-read": "1", "dir-list": "1", "spill-read": "1",
				"transcript-write": "0", "spill-write": "0", "other-list": "0",
				"workspace-write": "0", "uid": "4321",
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s = %s inside, want %s (probe %q)", k, got[k], v, res.Stdout.Text)
				}
			}
			// On the host, only the call's uid gained read access: an
			// unrelated user still cannot list the session directory.
			if ok, err := acl.MayAccess(filepath.Dir(path), 5555, 5555, acl.Read); ok || err != nil {
				t.Errorf("MayAccess(session dir, uid 5555) = %v, %v; want false", ok, err)
			}
			if ok, err := acl.MayAccess(filepath.Dir(other), 4321, 4321, acl.Read); ok || err != nil {
				t.Errorf("MayAccess(other session dir, uid 4321) = %v, %v; want false", ok, err)
			}
		})
	}
}

// TestIdentityHarnessAppends: a session directory the service created for
// a call of a harness running as uid 1000 stays writable by that harness.
func TestIdentityHarnessAppends(t *testing.T) {
	w := newIDWorld(t)
	ws := w.workspace(t, "append-ws", 1000)
	pol := w.policies["oci-runc-rw"]
	res := w.callAs(t, 1000, ws, "fresh", pol, nil, `echo "$DSH_SESSION_JSONL"`)
	transcript := strings.TrimSpace(res.Stdout.Text)
	if !filepath.IsAbs(transcript) {
		t.Fatalf("DSH_SESSION_JSONL inside = %q (stderr %q), want a path", transcript, res.Stderr.Text)
	}
	dir := filepath.Dir(transcript)
	if uid, _, perm := owned(t, dir); uid != 1000 || perm != 0o700 {
		t.Errorf("the session directory the service made is uid %d mode %o, want 1000 and 0700", uid, perm)
	}
	// The harness, as uid 1000, appends to its transcript there.
	line := `{"type":"note","text":"appended by the harness"}`
	app := exec.Command("sh", "-c", `printf '%s\n' "$1" >> "$2"`, "sh", line, transcript)
	app.Env = []string{"PATH=" + os.Getenv("PATH")}
	app.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{}}}
	if out, err := app.CombinedOutput(); err != nil {
		t.Fatalf("the harness (uid 1000) could not append to %s: %v %s", transcript, err, out)
	}
	// And a later call reads what it wrote.
	res = w.callAs(t, 1000, ws, "fresh", pol, nil, `cat "$DSH_SESSION_JSONL"`)
	if !strings.Contains(res.Stdout.Text, "appended by the harness") {
		t.Errorf("the next call read %q (stderr %q), want the harness's line", res.Stdout.Text, res.Stderr.Text)
	}
	// The legitimate refusal: another uid cannot append.
	app = exec.Command("sh", "-c", `printf x >> "$1"`, "sh", transcript)
	app.Env = []string{"PATH=" + os.Getenv("PATH")}
	app.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4321, Gid: 4321, Groups: []uint32{}}}
	if err := app.Run(); err == nil {
		t.Errorf("uid 4321 appended to the transcript of uid 1000")
	}
}

// userNSScript prints the call's uid map and uid, writes a file, and
// tries to make a setuid and a plain executable in the workspace.
const userNSScript = `cat /proc/self/uid_map
echo "uid=$(id -u)"
echo x > by-call
echo x > suid
if chmod 4755 suid 2>/dev/null; then echo chmod-suid=1; else echo chmod-suid=0; fi
echo x > plain
if chmod 755 plain; then echo chmod-plain=1; else echo chmod-plain=0; fi`

// uidMapLine is one line of /proc/self/uid_map.
type uidMapLine struct{ inside, outside, count uint64 }

// parseUserNS splits userNSScript's output into the uid map and the
// name=value lines.
func parseUserNS(t *testing.T, res *sandbox.Result) ([]uidMapLine, map[string]string) {
	t.Helper()
	var m []uidMapLine
	kv := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout.Text), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			kv[k] = v
			continue
		}
		var l uidMapLine
		if n, err := fmt.Sscan(line, &l.inside, &l.outside, &l.count); n != 3 || err != nil {
			t.Fatalf("uid_map line %q: %v (stdout %q, stderr %q)", line, err, res.Stdout.Text, res.Stderr.Text)
		}
		m = append(m, l)
	}
	if len(m) == 0 || kv["uid"] == "" {
		t.Fatalf("call printed %q (stderr %q), want a uid map and uid=", res.Stdout.Text, res.Stderr.Text)
	}
	return m, kv
}

// hostOf maps a container uid through m; ok is false when unmapped.
func hostOf(m []uidMapLine, c uint64) (uint64, bool) {
	for _, l := range m {
		if c >= l.inside && c-l.inside < l.count {
			return l.outside + c - l.inside, true
		}
	}
	return 0, false
}

// usernsBackend reports whether b runs every call in a user namespace
// that /proc/self/uid_map shows inside: oci with runc or crun,
// containerd (its runc shim), and docker (the engine scripts/daemons.sh
// starts remaps user namespaces). oci/runsc runs its calls in one too,
// but gVisor's uid_map is its own: runscUserNamespace looks from the host.
func usernsBackend(b idBackend) bool {
	return b.backend == "containerd" || b.backend == "docker" || b.backend == "oci" && b.runtime != "runsc"
}

// TestIdentityUserNamespace: on oci/runc, oci/crun, containerd and docker
// every call runs in a user namespace whose map never reaches host uid 0,
// also for a root-owned workspace (the CI checkout), where the call
// still writes the workspace with root-owned files (an id-mapped mount)
// but cannot leave a setuid-root program on the host. The legitimate
// variants: a plain chmod works, a uid-1000 workspace gets files owned by
// 1000 (on oci and containerd that uid is mapped 1:1; on docker the
// engine maps it into its range and the binds are id-mapped), and a
// policy that says user: host-root explicitly does run as host uid 0.
func TestIdentityUserNamespace(t *testing.T) {
	w := newIDWorld(t)
	for _, b := range idBackends {
		if b.runtime == "runsc" {
			runscUserNamespace(t, w, b)
			continue
		}
		if !usernsBackend(b) {
			continue
		}
		for _, owner := range []int{0, 1000} {
			t.Run(fmt.Sprintf("%s/uid-%d", b.name, owner), func(t *testing.T) {
				cell := fmt.Sprintf("userns-%s-%d", b.name, owner)
				ws := w.workspace(t, "ws-"+cell, owner)
				w.seed(t, ws, "s-"+cell, owner)
				res := w.callAs(t, owner, ws, "s-"+cell, w.policies[b.name+"-rw"], nil, userNSScript)
				m, kv := parseUserNS(t, res)
				for _, l := range m {
					if l.outside == 0 {
						t.Errorf("uid_map line %d %d %d maps to host uid 0", l.inside, l.outside, l.count)
					}
				}
				if kv["uid"] != fmt.Sprint(owner) {
					t.Errorf("uid inside = %s, want %d", kv["uid"], owner)
				}
				inside, _ := strconv.ParseUint(kv["uid"], 10, 32)
				host, ok := hostOf(m, inside)
				switch {
				case !ok || host == 0:
					t.Errorf("the call's uid %d maps to host %d (mapped %v), want an unprivileged host uid", inside, host, ok)
				case b.backend == "docker":
					// The engine's one range (userns-remap) for every
					// container uid: the call is never its host uid.
					if root, _ := hostOf(m, 0); host != root+inside || host == uint64(owner) {
						t.Errorf("the call's uid %d maps to host %d, want the engine's range (%d+%d)", inside, host, root, inside)
					}
				case owner != 0 && host != uint64(owner):
					t.Errorf("the call's uid %d maps to host %d, want %d (1:1)", inside, host, owner)
				}
				for _, name := range []string{"by-call", "plain", "suid"} {
					if uid, _, _ := owned(t, filepath.Join(ws, name)); uid != owner {
						t.Errorf("%s the call created is owned by uid %d on the host, want the workspace owner %d", name, uid, owner)
					}
				}
				if kv["chmod-plain"] != "1" {
					t.Errorf("chmod 755 inside = %s, want it to work", kv["chmod-plain"])
				}
				if _, _, perm := owned(t, filepath.Join(ws, "plain")); perm != 0o755 {
					t.Errorf("plain file mode %o on the host, want 0755", perm)
				}
				fi, err := os.Lstat(filepath.Join(ws, "suid"))
				if err != nil {
					t.Fatal(err)
				}
				uid, _, _ := owned(t, filepath.Join(ws, "suid"))
				if fi.Mode()&os.ModeSetuid != 0 && uid == 0 {
					t.Errorf("the call left a setuid-root file on the host (%v)", fi.Mode())
				}
				if owner == 0 && kv["chmod-suid"] != "0" {
					t.Errorf("chmod 4755 of a root-owned file inside = %s, want it refused", kv["chmod-suid"])
				}
			})
		}
		t.Run(b.name+"/host-root", func(t *testing.T) {
			cell := "userns-hostroot-" + b.name
			ws := w.workspace(t, "ws-"+cell, 0)
			w.seed(t, ws, "s-"+cell, 0)
			res := w.callAs(t, 0, ws, "s-"+cell, w.policies[b.name+"-rw-hostroot"], nil, userNSScript)
			m, kv := parseUserNS(t, res)
			if host, ok := hostOf(m, 0); !ok || host != 0 || kv["uid"] != "0" {
				t.Errorf("user: host-root: uid %s maps to host %d (mapped %v), want host uid 0 as the policy says", kv["uid"], host, ok)
			}
		})
	}
}

// runscUserNamespace is TestIdentityUserNamespace under runsc, where
// /proc/self/uid_map is gVisor's own: the host processes of the call,
// gVisor's gofer (which makes the call's files on the host) and its
// Sentry, are seen from the host while the call runs. Neither is host
// uid 0, also for a root-owned workspace, whose files the call still
// creates as root (an id-mapped mount) but without setuid bits; a
// uid-1000 workspace gets files of uid 1000; user: host-root runs the
// gofer as host uid 0 on purpose.
func runscUserNamespace(t *testing.T, w *idWorld, b idBackend) {
	for _, c := range []struct {
		name, pol    string
		owner        int
		gofer        uint64
		setidRefused bool
	}{
		{"uid-0", "rw", 0, uint64(1) << 31, true},
		{"uid-1000", "rw", 1000, uint64(1) << 31, false},
		{"host-root", "rw-hostroot", 0, 0, false},
	} {
		t.Run(b.name+"/"+c.name, func(t *testing.T) {
			cell := fmt.Sprintf("userns-%s-%s", b.name, c.name)
			ws := w.workspace(t, "ws-"+cell, c.owner)
			w.seed(t, ws, "s-"+cell, c.owner)
			done := make(chan struct{})
			seen := make(chan map[string][]uint64, 1)
			go func() { seen <- watchRunsc(w.e.state+"/", done) }()
			res := w.callAs(t, c.owner, ws, "s-"+cell, w.policies[b.name+"-"+c.pol], nil, userNSScript+"\nsleep 1")
			close(done)
			procs := <-seen
			_, kv := parseUserNS(t, res)
			if kv["uid"] != fmt.Sprint(c.owner) {
				t.Errorf("uid inside = %s, want %d", kv["uid"], c.owner)
			}
			for _, name := range []string{"runsc-gofer", "runsc-sandbox"} {
				uids, ok := procs[name]
				if !ok {
					t.Errorf("no %s process of the call was seen on the host (saw %v)", name, procs)
				}
				for _, u := range uids {
					if name == "runsc-gofer" && u != c.gofer || name == "runsc-sandbox" && u == 0 {
						t.Errorf("%s runs as host uids %v, want %s", name, uids, map[bool]string{true: fmt.Sprint(c.gofer), false: "not 0"}[name == "runsc-gofer"])
						break
					}
				}
			}
			for _, name := range []string{"by-call", "plain", "suid"} {
				if uid, _, _ := owned(t, filepath.Join(ws, name)); uid != c.owner {
					t.Errorf("%s the call created is owned by uid %d on the host, want the workspace owner %d", name, uid, c.owner)
				}
			}
			if kv["chmod-plain"] != "1" {
				t.Errorf("chmod 755 inside = %s, want it to work", kv["chmod-plain"])
			}
			fi, err := os.Lstat(filepath.Join(ws, "suid"))
			if err != nil {
				t.Fatal(err)
			}
			if c.setidRefused && (kv["chmod-suid"] != "0" || fi.Mode()&os.ModeSetuid != 0) {
				t.Errorf("chmod 4755 of a root-owned file inside = %s, host mode %v; want it refused", kv["chmod-suid"], fi.Mode())
			}
		})
	}
}

// watchRunsc collects, until done is closed, the host uids (real,
// effective, saved, file system) of every gofer and Sentry process of
// runsc whose command line names a path below state, by argv[0].
func watchRunsc(state string, done <-chan struct{}) map[string][]uint64 {
	seen := map[string][]uint64{}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		entries, _ := os.ReadDir("/proc")
		for _, ent := range entries {
			cmdline, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
			if err != nil || !strings.Contains(string(cmdline), state) {
				continue
			}
			name, _, _ := strings.Cut(string(cmdline), "\x00")
			if name != "runsc-gofer" && name != "runsc-sandbox" {
				continue
			}
			status, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "status"))
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(status), "\n") {
				if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
					for _, f := range strings.Fields(rest) {
						if u, err := strconv.ParseUint(f, 10, 32); err == nil {
							seen[name] = append(seen[name], u)
						}
					}
				}
			}
		}
		select {
		case <-done:
			return seen
		case <-tick.C:
		}
	}
}

// harnessUID is the harness user of TestIdentityTranscriptAnyUID: the
// uid dsh runs as and writes its transcript as.
const harnessUID = 1000

// seedAsHarness writes the transcript of session id in workspace ws the
// way dsh writes it, as the harness uid itself: a temporary file opened
// exclusively with mode 0600 (umask 077, noclobber), then link() to its
// name and the temporary name removed. The directories are 0700 and the
// harness's. It returns the transcript's path and bytes.
func (w *idWorld) seedAsHarness(t *testing.T, ws, id string, uid int) (string, []byte) {
	t.Helper()
	path, data := w.transcriptDir(t, ws, id, uid)
	tmp := path + ".tmp-" + strconv.Itoa(os.Getpid())
	cmd := exec.Command("sh", "-c", `umask 077; set -C; cat > "$1" && ln "$1" "$2" && rm "$1"`, "sh", tmp, path)
	cmd.Stdin = strings.NewReader(string(data))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the harness (uid %d) writing its transcript: %v %s", uid, err, out)
	}
	if u, g, perm := owned(t, path); u != uid || g != uid || perm != 0o600 {
		t.Fatalf("transcript %d:%d mode %o, want %d:%d 0600 as dsh leaves it", u, g, perm, uid, uid)
	}
	return path, data
}

// tamperScript reads the transcript and a spill file, then tries every
// way to change them: append, rename, replace by a rename over it,
// remove, chmod, and a new file in the session directory. It prints
// NAME=1 for what worked, NAME=0 for what was refused; the reads print
// 1 only when the transcript's SHA-256 is $WANT and the spill file has
// $WANTSPILL bytes.
const tamperScript = `c() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "$n=1"; else echo "$n=0"; fi; }
T=$DSH_SESSION_JSONL; D=$(dirname "$T")
c read sh -c 'cat "$DSH_SESSION_JSONL" >/tmp/t && [ "$(sha256sum </tmp/t)" = "$WANT  -" ]'
c spill-read sh -c 'cat "$SPILL" >/tmp/s && [ "$(wc -c </tmp/s)" = "$WANTSPILL" ]'
c append sh -c 'echo x >> "$1"' sh "$T"
c rename mv "$T" "$T.moved"
c replace sh -c 'echo forged > "$1/forged" && mv -f "$1/forged" "$2"' sh "$D" "$T"
c remove rm -f "$T"
c chmod chmod 0666 "$T"
c create touch "$D/new"
c spill-append sh -c 'echo x >> "$1"' sh "$SPILL"
c spill-rename mv "$SPILL" "$SPILL.moved"
c spill-remove rm -f "$SPILL"
echo "uid=$(id -u)"`

// TestIdentityTranscriptAnyUID: the transcript dsh writes (0600, the
// harness's, made by link()) and the spill files are read by a call
// whatever uid it runs as and whoever the harness is — a root-owned
// workspace (harness root, call container root), a harness-owned one
// (the call is the harness, or a policy user that is not), a third
// uid's workspace with a root harness (the call is that uid) — and none
// of them can write, rename, replace or remove either: the session
// directory is an id-mapped read-only mount through which its owner is
// the call (docs/identity.md). On every backend: oci (runc, crun,
// runsc), containerd and docker.
func TestIdentityTranscriptAnyUID(t *testing.T) {
	w := newIDWorld(t)
	for _, b := range idBackends {
		for _, c := range []struct {
			name    string
			harness int    // the harness user (the client's uid)
			owner   int    // the workspace's owner
			pol     string // the policy profile
			uid     int    // the uid the call runs as
		}{
			{"root-workspace", 0, 0, "ro", 0},
			{"harness-workspace", 1000, 1000, "ro", 1000},
			{"harness-workspace-policy-user", 1000, 1000, "ro-4321", 4321},
			{"root-harness-uid-1000-workspace", 0, 1000, "ro", 1000},
			{"third-uid-workspace", 0, 4321, "ro", 4321},
		} {
			t.Run(b.name+"/"+c.name, func(t *testing.T) {
				cell := fmt.Sprintf("anyuid-%s-%s", b.name, c.name)
				ws := w.workspace(t, "ws-"+cell, c.owner)
				id := "s-" + cell
				path, before := w.seedAsHarness(t, ws, id, c.harness)
				pol := w.policies[b.name+"-"+c.pol]
				spill := w.spillOf(t, c.harness, ws, id, pol)
				spillUID, _, spillMode := owned(t, spill)
				sum := sha256.Sum256(before)
				res := w.callAs(t, c.harness, ws, id, pol,
					[]string{"SPILL=" + spill, "WANT=" + hex.EncodeToString(sum[:]), "WANTSPILL=5000"}, tamperScript)
				got := map[string]string{}
				for _, line := range strings.Split(strings.TrimSpace(res.Stdout.Text), "\n") {
					k, v, _ := strings.Cut(line, "=")
					got[k] = v
				}
				if got["uid"] != fmt.Sprint(c.uid) {
					t.Fatalf("the call ran as uid %q, want %d (stdout %q, stderr %q)", got["uid"], c.uid, res.Stdout.Text, res.Stderr.Text)
				}
				want := map[string]string{"read": "1", "spill-read": "1"}
				for _, k := range []string{"append", "rename", "replace", "remove", "chmod", "create", "spill-append", "spill-rename", "spill-remove"} {
					want[k] = "0"
				}
				for k, v := range want {
					if got[k] != v {
						t.Errorf("%s = %s inside, want %s (probe %q, stderr %q)", k, got[k], v, res.Stdout.Text, res.Stderr.Text)
					}
				}
				// On the host nothing changed.
				if after, err := os.ReadFile(path); err != nil || string(after) != string(before) {
					t.Errorf("transcript after the call: %q, %v; want it unchanged", after, err)
				}
				if u, g, perm := owned(t, path); u != c.harness || g != c.harness || perm != 0o600 {
					t.Errorf("transcript %d:%d mode %o after the call, want %d:%d 0600", u, g, perm, c.harness, c.harness)
				}
				if fi, err := os.Stat(spill); err != nil || fi.Size() != 5000 {
					t.Errorf("spill file after the call: %v, %v; want 5000 bytes", fi, err)
				}
				if u, _, perm := owned(t, spill); u != spillUID || perm != spillMode {
					t.Errorf("spill file uid %d mode %o after the call, want %d %o", u, perm, spillUID, spillMode)
				}
				for _, p := range []string{path + ".moved", spill + ".moved", filepath.Join(filepath.Dir(path), "new"), filepath.Join(filepath.Dir(path), "forged")} {
					if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("%s exists after the call (%v)", p, err)
					}
				}
			})
		}
	}
}
