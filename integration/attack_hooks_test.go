//go:build integration

package integration

// The attack suite of issue 10 (trust boundary): each test plays one
// attack a sandboxed call could mount by writing files into its own
// workspace, or by choosing its words, and asserts both that the attack is
// refused or contained and that the legitimate variant still works.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/hooks"
)

// trustRun is run under a 20 s deadline: a command that hangs (on a
// FIFO, say) is killed and reported, never left to hang the suite.
func trustRun(t *testing.T, extraEnv []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, extraEnv...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v did not finish within 20s (it hangs): stderr %q", args, stderr.String())
	}
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running %v: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), code}
}

// trustWrite writes body to path with exactly mode, creating its directory.
func trustWrite(t *testing.T, path, body string, mode os.FileMode) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // not subject to the umask
		t.Fatal(err)
	}
	return path
}

// trustAbsent fails when the attack's marker exists.
func trustAbsent(t *testing.T, path, what string) {
	t.Helper()
	if _, err := os.Lstat(path); err == nil {
		t.Errorf("%s: %s exists; the attack ran", what, path)
	}
}

// trustHooksArgs are the arguments of `hooks run` for a Stop event of
// session s-trust in e's workspace.
func trustHooksArgs(e env, cfg string, extra ...string) []string {
	return append(append([]string{"hooks", "run", "--dialect", "claude-code", "--config", cfg, "--event", "Stop", "--json"}, e.flags("s-trust")...), extra...)
}

// trustHookOutput decodes the outcome of `hooks run --json` with one hook.
func trustHookOutput(t *testing.T, r result) hooks.HookResult {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("hooks run exited %d: %s", r.code, r.stderr)
	}
	var o hooks.Outcome
	if err := json.Unmarshal([]byte(r.stdout), &o); err != nil || len(o.Hooks) != 1 {
		t.Fatalf("hooks run printed %q (%v), want an outcome with one hook", r.stdout, err)
	}
	return o.Hooks[0]
}

// A call plants .claude/settings.json naming its own policy (backend
// local, the host's /root read-write, root) next to evil.yaml; the next
// `hooks run` must refuse the configuration and run nothing, and the
// operator's policy must confine a clean configuration's hook.
func TestAttackHookConfigNamesPolicy(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	marker := filepath.Join(t.TempDir(), "pwned") // on the host, outside every mount
	trustWrite(t, filepath.Join(e.workspace, ".claude", "evil.yaml"),
		"backend: local\nuser: \"0:0\"\nmounts: [{source: /root, target: /root, mode: rw}]\n", 0o644)
	evil := trustWrite(t, filepath.Join(e.workspace, ".claude", "settings.json"),
		`{"policy":"evil.yaml","hooks":{"Stop":[{"hooks":[{"type":"command","command":"touch `+marker+`"}]}]}}`, 0o644)

	r := trustRun(t, nil, trustHooksArgs(e, evil)...)
	if r.code != 2 || !strings.Contains(r.stderr, "policy") || !strings.Contains(r.stderr, "hooks run --policy") {
		t.Errorf("hooks run with a planted policy key = exit %d, stderr %q; want exit 2 naming the key and hooks run --policy", r.code, r.stderr)
	}
	// Naming the planted policy on the command line is refused as well.
	clean := trustWrite(t, filepath.Join(e.workspace, ".claude", "clean.json"),
		`{"hooks":{"Stop":[{"hooks":[{"command":"touch `+marker+`"}]}]}}`, 0o644)
	r = trustRun(t, nil, trustHooksArgs(e, clean, "--policy", filepath.Join(e.workspace, ".claude", "evil.yaml"))...)
	if r.code != 2 || !strings.Contains(r.stderr, "--policy") || !strings.Contains(r.stderr, "lies inside the workspace") {
		t.Errorf("hooks run --policy <workspace>/evil.yaml = exit %d, stderr %q; want exit 2 naming --policy and the workspace", r.code, r.stderr)
	}
	trustAbsent(t, marker, "hooks of a planted configuration")

	// The legitimate variant: a clean configuration under the operator's
	// policy runs, in a container (another pid namespace than the host's).
	hostNS, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	ok := trustWrite(t, filepath.Join(e.workspace, ".claude", "ok.json"),
		`{"hooks":{"Stop":[{"hooks":[{"command":"readlink /proc/self/ns/pid; touch ./hook-ran"}]}]}}`, 0o644)
	for _, extra := range [][]string{nil, {"--policy", "workspace-write"}} {
		h := trustHookOutput(t, trustRun(t, nil, trustHooksArgs(e, ok, extra...)...))
		ns := strings.TrimSpace(h.Output)
		if h.ExitCode == nil || *h.ExitCode != 0 || !strings.HasPrefix(ns, "pid:[") || ns == hostNS {
			t.Errorf("hooks run %v: hook printed %q (exit %v, error %q); want a pid namespace other than the host's %s", extra, h.Output, h.ExitCode, h.Error, hostNS)
		}
		if _, err := os.Stat(filepath.Join(e.workspace, "hook-ran")); err != nil {
			t.Errorf("hooks run %v: the hook did not run in the workspace: %v", extra, err)
		}
		os.Remove(filepath.Join(e.workspace, "hook-ran"))
	}
}

// A FIFO planted as the configuration or the policy must not hang `hooks
// run`; a symbolic link must not make it read another file; a regular file
// works.
func TestAttackHookFilesNotRegular(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	dir := filepath.Join(e.workspace, ".claude")
	good := trustWrite(t, filepath.Join(dir, "settings.json"), `{"hooks":{"Stop":[{"hooks":[{"command":"echo ran"}]}]}}`, 0o644)
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	ops := t.TempDir() // the operator's directory, outside the workspace
	fifoPolicy := filepath.Join(ops, "fifo.yaml")
	if err := syscall.Mkfifo(fifoPolicy, 0o644); err != nil {
		t.Fatal(err)
	}
	linkPolicy := filepath.Join(ops, "link.yaml")
	if err := os.Symlink(trustWrite(t, filepath.Join(ops, "real.yaml"), "name: ops\n", 0o644), linkPolicy); err != nil {
		t.Fatal(err)
	}

	for _, tt := range []struct {
		name      string
		args      []string
		file, why string
	}{
		{"config FIFO", trustHooksArgs(e, fifo), fifo, "is a FIFO"},
		{"policy FIFO", trustHooksArgs(e, good, "--policy", fifoPolicy), fifoPolicy, "is a FIFO"},
		{"config symlink", trustHooksArgs(e, link), link, "is a symbolic link"},
		{"policy symlink", trustHooksArgs(e, good, "--policy", linkPolicy), linkPolicy, "is a symbolic link"},
		{"config directory", trustHooksArgs(e, dir), dir, "is a directory"},
	} {
		r := trustRun(t, nil, tt.args...)
		if r.code == 0 || !strings.Contains(r.stderr, tt.file) || !strings.Contains(r.stderr, tt.why) {
			t.Errorf("%s: hooks run = exit %d, stderr %q; want an error naming %s and saying %q", tt.name, r.code, r.stderr, tt.file, tt.why)
		}
	}
	// The legitimate variant: the regular files.
	for _, extra := range [][]string{nil, {"--policy", filepath.Join(ops, "real.yaml")}} {
		if h := trustHookOutput(t, trustRun(t, nil, trustHooksArgs(e, good, extra...)...)); h.Output != "ran\n" {
			t.Errorf("hooks run %v with a regular configuration: hook printed %q (error %q), want %q", extra, h.Output, h.Error, "ran\n")
		}
	}
}

// A policy file inside the workspace (which calls can write) is refused
// by exec; the same policy outside it, root-owned 0644, is accepted; a
// group-writable one, or one inside a --workspace-roots directory, is
// refused.
func TestAttackExecPolicyFileTrust(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	ran := filepath.Join(e.workspace, "ran")
	execArgs := func(extra ...string) []string {
		return append(append([]string{"exec"}, e.flags("")...), append(extra, "--", "touch", ran)...)
	}
	inside := trustWrite(t, filepath.Join(e.workspace, "evil.yaml"), "backend: local\n", 0o644)
	ops := t.TempDir()
	outside := trustWrite(t, filepath.Join(ops, "ops.yaml"), "name: ops\nworkspace: rw\n", 0o644)
	groupWritable := trustWrite(t, filepath.Join(ops, "gw.yaml"), "name: gw\n", 0o664)
	roots := t.TempDir()
	inRoot := trustWrite(t, filepath.Join(roots, "proj", "p.yaml"), "name: inroot\n", 0o644)

	for _, tt := range []struct {
		name  string
		extra []string
		why   string
	}{
		{"inside the workspace", []string{"--policy", inside}, "lies inside the workspace"},
		{"group-writable", []string{"--policy", groupWritable}, "writable by its group or by others"},
		{"inside a workspace root", []string{"--workspace-roots", roots, "--policy", inRoot}, "lies inside workspace root"},
	} {
		r := trustRun(t, nil, execArgs(tt.extra...)...)
		if r.code != 2 || !strings.Contains(r.stderr, "--policy") || !strings.Contains(r.stderr, tt.why) {
			t.Errorf("exec %v = exit %d, stderr %q; want exit 2 naming --policy and %q", tt.extra, r.code, r.stderr, tt.why)
		}
		trustAbsent(t, ran, "exec "+tt.name)
	}
	r := trustRun(t, nil, execArgs("--policy", outside)...)
	if r.code != 0 {
		t.Fatalf("exec --policy %s (root-owned 0644, outside the workspace) = exit %d: %s", outside, r.code, r.stderr)
	}
	if _, err := os.Stat(ran); err != nil {
		t.Errorf("exec --policy %s did not run the command: %v", outside, err)
	}
}

// A workspace whose name holds shell syntax: the hook's
// ${CLAUDE_PROJECT_DIR} reaches it as an environment variable, so it
// prints the path and `touch x` never runs.
func TestAttackHookPlaceholderInjection(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	ws := filepath.Join(filepath.Dir(e.workspace), `p";touch x;"`)
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	e.workspace = ws
	conf := t.TempDir()
	cfg := trustWrite(t, filepath.Join(conf, "settings.json"),
		`{"hooks":{"Stop":[{"hooks":[{"command":"echo \"${CLAUDE_PROJECT_DIR}\"; echo \"$CLAUDE_PROJECT_DIR\""}]}]}}`, 0o644)
	h := trustHookOutput(t, trustRun(t, nil, trustHooksArgs(e, cfg)...))
	if want := ws + "\n" + ws + "\n"; h.Output != want || h.ExitCode == nil || *h.ExitCode != 0 {
		t.Errorf("hook printed %q (exit %v, error %q), want the path twice, literally: %q", h.Output, h.ExitCode, h.Error, want)
	}
	for _, dir := range []string{ws, filepath.Dir(ws), conf} {
		trustAbsent(t, filepath.Join(dir, "x"), "placeholder injection")
	}
}

// trustBackend is one backend the exec-level attacks run on.
type trustBackend struct {
	name   string
	daemon bool     // needs the test daemons and the imported image
	flags  []string // --backend/--runtime/--image and the daemon flags
}

const trustImage = "dsh-itest-attack:1"

var trustBackends = []trustBackend{
	{"oci-runc", false, []string{"--runtime", "runc"}},
	{"oci-crun", false, []string{"--runtime", "crun"}},
	{"oci-runsc", false, []string{"--runtime", "runsc"}},
	{"docker", true, append([]string{"--backend", "docker", "--image", trustImage}, daemonFlags()...)},
	{"containerd", true, append([]string{"--backend", "containerd", "--image", trustImage}, daemonFlags()...)},
}

// forEachTrustBackend runs f for every backend of trustBackends as a subtest;
// the daemon backends get the image, imported once into e.
func forEachTrustBackend(t *testing.T, e env, f func(t *testing.T, b trustBackend)) {
	imported := false
	for _, b := range trustBackends {
		t.Run(b.name, func(t *testing.T) {
			if b.daemon {
				requireDaemons(t)
				if !imported {
					importEverywhere(t, e, testImageTar(t), trustImage)
					imported = true
				}
			}
			f(t, b)
		})
	}
}

// exec with several words runs exactly that argv; with one it is still a
// bash command line.
func TestAttackExecArgv(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	forEachTrustBackend(t, e, func(t *testing.T, b trustBackend) {
		args := append(append([]string{"exec"}, e.flags("")...), b.flags...)
		r := trustRun(t, nil, append(args, "--", "printf", `%s\n`, "c;d")...)
		if r.code != 0 || r.stdout != "c;d\n" {
			t.Errorf("exec -- printf '%%s\\n' 'c;d' = exit %d, stdout %q, stderr %q; want exactly %q", r.code, r.stdout, r.stderr, "c;d\n")
		}
		r = trustRun(t, nil, append(args, "--", "echo a; echo b")...)
		if r.code != 0 || r.stdout != "a\nb\n" {
			t.Errorf("exec -- 'echo a; echo b' = exit %d, stdout %q, stderr %q; want %q (one word is a bash command line)", r.code, r.stdout, r.stderr, "a\nb\n")
		}
	})
}

// A policy that inherits the service's secrets by name passes none of
// them, only LANG; env.allowSecrets passes the one it names. The call
// prints a digest of each value it got: a secret's value itself would be
// redacted from its output (docs/policy.md, "redact"), allowed or not.
func TestAttackInheritSecrets(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	service := []string{"DATABASE_URL=postgres://u:p@h/db", "GH_PAT=x", "NPM_AUTH=y", "SENTRY_DSN=z", "LANG=C"}
	names := "[DATABASE_URL, GH_PAT, NPM_AUTH, SENTRY_DSN, LANG]"
	ops := t.TempDir()
	all := trustWrite(t, filepath.Join(ops, "inherit-all.yaml"), "env: {inherit: "+names+"}\n", 0o644)
	allow := trustWrite(t, filepath.Join(ops, "allow-db.yaml"), "env: {inherit: "+names+", allowSecrets: [DATABASE_URL]}\n", 0o644)
	forEachTrustBackend(t, e, func(t *testing.T, b trustBackend) {
		for _, tt := range []struct {
			policy string
			want   []string
		}{
			{all, []string{digestLine("LANG=C")}},
			{allow, []string{digestLine("DATABASE_URL=postgres://u:p@h/db"), digestLine("LANG=C")}},
		} {
			args := append(append([]string{"exec"}, e.flags("")...), b.flags...)
			probe := `for v in DATABASE_URL GH_PAT NPM_AUTH SENTRY_DSN LANG; do if [ -n "${!v+set}" ]; then printf '%s=%s\n' "$v" "$(printf '%s' "${!v}" | sha256sum | cut -c1-16)"; fi; done`
			r := trustRun(t, service, append(args, "--policy", tt.policy, "--", probe)...)
			if r.code != 0 {
				t.Fatalf("exec --policy %s = exit %d: %s", filepath.Base(tt.policy), r.code, r.stderr)
			}
			got := strings.Fields(r.stdout)
			slices.Sort(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("exec --policy %s: the child got %q of the service's variables, want %q", filepath.Base(tt.policy), got, tt.want)
			}
		}
	})
}

// digestLine is kv ("NAME=VALUE") as the probe of TestAttackInheritSecrets
// prints it: the name and the first 16 hex digits of the value's sha256.
func digestLine(kv string) string {
	name, value, _ := strings.Cut(kv, "=")
	sum := sha256.Sum256([]byte(value))
	return name + "=" + hex.EncodeToString(sum[:])[:16]
}
