//go:build integration

package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/client"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
)

// waitLog waits until the service's stderr holds want, at most 30 s.
func (sv *service) waitLog(t *testing.T, want string) string {
	t.Helper()
	for range 1500 {
		if out := sv.logs(); strings.Contains(out, want) {
			return out
		}
		select {
		case <-sv.done:
			t.Fatalf("serve exited while waiting for %q: %s", want, sv.logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatalf("serve did not log %q: %s", want, sv.logs())
	return ""
}

func (sv *service) logs() string {
	w := sv.cmd.Stderr.(*lockedWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	return sv.stderr.String()
}

// auditRecords verifies the audit file at path and returns its records
// and head hash.
func auditRecords(t *testing.T, path string) (int, string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, head, err := api.VerifyAudit(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("audit log %s: %v", path, err)
	}
	return n, head
}

func TestServeSIGHUPReopensAuditAndReloadsPolicies(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	pol := filepath.Join(t.TempDir(), "extra.yaml")
	writePolicy := func(name string) {
		doc := "name: " + name + "\nbackend: oci\nruntime: runc\nimage: host\nworkspace: rw\n"
		if err := os.WriteFile(pol, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writePolicy("first")
	sv := startServe(t, e, "--policy-file", pol)
	ctx := context.Background()
	call := func(policy, command string) error {
		t.Helper()
		resp, err := sv.cl.Run(ctx, types.RunRequest{Session: e.header("s1"), Policy: policy, Command: command})
		if err == nil && (resp.Result.ExitCode == nil || *resp.Result.ExitCode != 0) {
			t.Fatalf("call %q under %s: %+v", command, policy, resp.Result)
		}
		return err
	}
	if err := call("first", "echo marker-before-rotation"); err != nil {
		t.Fatal(err)
	}
	logs := sv.waitLog(t, `"message":"call"`)
	if !strings.Contains(logs, `"message":"serving"`) || !strings.Contains(logs, sv.sock) {
		t.Errorf("serve did not log at info where it listens: %s", logs)
	}
	if strings.Contains(logs, "marker-before-rotation") {
		t.Errorf("serve logged command text: %s", logs)
	}

	// Rotation: rename, SIGHUP, and the next call lands in a new file.
	rotated := sv.audit + ".1"
	if err := os.Rename(sv.audit, rotated); err != nil {
		t.Fatal(err)
	}
	_, oldHead := auditRecords(t, rotated)
	writePolicy("second")
	if err := sv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	logs = sv.waitLog(t, "policies reloaded")
	if !strings.Contains(logs, "audit log reopened") || !strings.Contains(logs, oldHead) {
		t.Errorf("the reopen is not logged with the old file's head %s: %s", oldHead, logs)
	}
	if err := call("second", "true"); err != nil {
		t.Fatalf("a call under the reloaded policy: %v", err)
	}
	if err := call("first", "true"); api.HTTPStatus(err) != 400 {
		t.Errorf("a call under the policy the reload dropped: %v, want 400", err)
	}
	if n, _ := auditRecords(t, rotated); n != 1 {
		t.Errorf("the rotated file holds %d records, want 1 (nothing after the SIGHUP)", n)
	}
	if n, _ := auditRecords(t, sv.audit); n != 1 {
		t.Errorf("the new audit file holds %d records, want 1 (the call after the SIGHUP; the refused one ran nothing)", n)
	}

	// A SIGHUP without rotation continues the same file and chain; a
	// policy file that no longer loads keeps the old policies.
	if err := os.WriteFile(pol, []byte("name: [broken\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sv.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	sv.waitLog(t, "the old ones stay in use")
	if err := call("second", "true"); err != nil {
		t.Errorf("a call under the kept policy after a failed reload: %v", err)
	}
	if n, _ := auditRecords(t, sv.audit); n != 2 {
		t.Errorf("the audit file holds %d records after a SIGHUP without rotation, want 2", n)
	}
	select {
	case <-sv.done:
		t.Fatalf("serve exited on SIGHUP: %s", sv.logs())
	default:
	}

	// SIGTERM: the service says it stops, and that it stopped.
	sv.stop(t)
	if logs := sv.logs(); !strings.Contains(logs, `"message":"stopping: signal received`) || !strings.Contains(logs, `"message":"stopped"`) {
		t.Errorf("serve did not log its stop at info: %s", logs)
	}
}

func TestServeSocketActivation(t *testing.T) {
	requireRoot(t)
	activate, err := exec.LookPath("systemd-socket-activate")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("systemd-socket-activate is missing (Debian package systemd; scripts/setup.sh installs it)")
		}
		t.Skip("systemd-socket-activate is missing (Debian package systemd)")
	}
	e := newEnv(t)
	sockDir := filepath.Join(t.TempDir(), "activated")
	if err := os.Mkdir(sockDir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(sockDir, "sandbox.sock")
	sv := &service{sock: sock, audit: filepath.Join(e.data, "audit.jsonl"), stderr: &bytes.Buffer{}, done: make(chan struct{})}
	args := append([]string{"--listen=" + sock, "--fdname=dsh", binary, "serve"}, e.flags("")...)
	sv.cmd = exec.Command(activate, args...)
	sv.cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	sv.cmd.Stderr = &lockedWriter{w: sv.stderr}
	if err := sv.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { sv.cmd.Wait(); close(sv.done) }()
	t.Cleanup(func() { sv.stop(t) })
	if sv.cl, err = newClient(t, "unix://"+sock, client.Options{}); err != nil {
		t.Fatal(err)
	}
	// The socket exists before the service runs: the first connection
	// starts it, and waits for its answer.
	for {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		select {
		case <-sv.done:
			t.Fatalf("systemd-socket-activate exited: %s", sv.logs())
		case <-time.After(20 * time.Millisecond):
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := sv.cl.Run(ctx, types.RunRequest{Session: e.header("s1"), Policy: "workspace-write", Command: "echo activated"})
	if err != nil || resp.Result.Stdout.Text != "activated\n" {
		t.Fatalf("a call through the inherited socket = %+v, %v; logs %s", resp, err, sv.logs())
	}
	logs := sv.waitLog(t, `"inherited":true`)
	if !strings.Contains(logs, sock) {
		t.Errorf("serve did not log the inherited socket %s: %s", sock, logs)
	}
	if _, err := os.Stat(filepath.Join(e.home, "run", "sandbox.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("serve also listened on its default socket under socket activation: %v", err)
	}
	// The peer is still identified on the inherited socket: GET /v1/calls
	// answers for this client (none running now).
	if calls, err := sv.cl.Calls(ctx); err != nil || len(calls) != 0 {
		t.Errorf("Calls = %+v, %v; want none", calls, err)
	}
	sv.stop(t)
	if _, err := os.Stat(sock); err != nil {
		t.Errorf("the service removed the socket it inherited (its owner's): %v", err)
	}
}

func TestServeExecServerExitCodes(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good"), filepath.Join(dir, "bad")
	for f, tok := range map[string]string{good: "tok-good-0123456789abcdef", bad: "tok-bad-0123456789abcdef"} {
		if err := os.WriteFile(f, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	port := freeTCP(t)
	startServe(t, e, "--listen", "unix://"+filepath.Join(e.home, "run", "sandbox.sock"), "--listen", "tcp://"+port, "--token-file", good)
	exit := func(args ...string) result {
		t.Helper()
		return run(t, nil, append(append([]string{"exec"}, e.flags("s1")...), args...)...)
	}
	if r := exit("--server", "tcp://"+port, "--token-file", good, "--", "exit 3"); r.code != 3 {
		t.Errorf("a call that ran and exited 3: exit %d (%q)", r.code, r.stderr)
	}
	if r := exit("--server", "tcp://"+port, "--token-file", bad, "--", "touch ran"); r.code != 125 || !strings.Contains(r.stderr, "credentials") {
		t.Errorf("a wrong token: exit %d (%q), want 125 naming the credentials", r.code, r.stderr)
	}
	if r := exit("--server", "unix://"+filepath.Join(dir, "none.sock"), "--", "touch ran"); r.code != 125 || !strings.Contains(r.stderr, "unreachable") {
		t.Errorf("no service: exit %d (%q), want 125 naming it unreachable", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(e.workspace, "ran")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused call ran: %v", err)
	}
}

func TestCompletionBashEndToEnd(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "c.bash")
	r := run(t, nil, "completion", "bash")
	if r.code != 0 {
		t.Fatalf("completion bash: exit %d: %s", r.code, r.stderr)
	}
	if err := os.WriteFile(script, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(dir, "ran")
	// complete runs the script's function for the words typed so far
	// (the last one is being completed) and prints the candidates.
	complete := func(words ...string) string {
		t.Helper()
		prog := `source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _dsh_sandbox; printf '%s\n' "${COMPREPLY[@]}"`
		out, err := exec.Command("bash", append([]string{"-c", prog, "bash", script, binary}, words...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("completing %q: %v: %s", words, err, out)
		}
		return string(out)
	}
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"ima"}, "images\n"},
		{[]string{"images", ""}, "rm\n"},
		{[]string{"exec", "--time"}, "--timeout\n"},
	} {
		if got := complete(tc.words...); !strings.Contains(got, tc.want) {
			t.Errorf("completing %q = %q, want it to contain %q", tc.words, got, tc.want)
		}
	}
	// After -- the words are the call's own: nothing is asked, nothing runs.
	if got := complete("exec", "--", "touch "+marker, ""); strings.TrimSpace(got) != "" {
		t.Errorf("completing after -- offered %q, want nothing from the program", got)
	}
	r = run(t, nil, "exec", "--", "touch "+marker, "--generate-bash-completion")
	if r.code != 2 {
		t.Errorf("a completion request after --: exit %d (%q), want 2", r.code, r.stderr)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("completion ran the call being typed: %v", err)
	}
}

func TestServeCallsListAndCancel(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	sv := startServe(t, e)
	ctx := context.Background()
	marker := "dsh-calls-" + filepath.Base(filepath.Dir(filepath.Dir(e.home))) // unique per run
	type out struct {
		resp *types.RunResponse
		err  error
	}
	ran := make(chan out, 1)
	go func() {
		resp, err := sv.cl.Run(ctx, types.RunRequest{Session: e.header("s1"), Policy: "workspace-write",
			Env: []string{"MARKER=" + marker}, Command: `exec -a "$MARKER" sleep 600`})
		ran <- out{resp, err}
	}()
	var calls []types.CallInfo
	for {
		var err error
		if calls, err = sv.cl.Calls(ctx); err != nil {
			t.Fatal(err)
		}
		if len(calls) == 1 && calls[0].State == types.CallRunning && len(processesWith(marker)) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	c := calls[0]
	if c.Kind != types.CallKindRun || c.SessionID != "s1" || c.Policy != "workspace-write" || c.Backend != "oci" {
		t.Errorf("the running call is listed as %+v", c)
	}
	if err := sv.cl.CancelCall(ctx, c.ID); err != nil {
		t.Fatalf("CancelCall: %v", err)
	}
	o := <-ran
	if o.err != nil || !o.resp.Result.Aborted || o.resp.ExecutionID != c.ID {
		t.Errorf("the cancelled call answered %+v, %v; want aborted, execution %s", o.resp, o.err, c.ID)
	}
	if pids := processesWith(marker); len(pids) != 0 {
		t.Errorf("processes of the cancelled call still run: %v", pids)
	}
	if calls, err := sv.cl.Calls(ctx); err != nil || len(calls) != 0 {
		t.Errorf("Calls after the cancel = %+v, %v; want none", calls, err)
	}
	if err := sv.cl.CancelCall(ctx, c.ID); api.HTTPStatus(err) != 404 {
		t.Errorf("cancelling an ended call: %v, want 404", err)
	}
}
