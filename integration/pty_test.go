//go:build integration

package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// requireTmux returns tmux's path; without it the test skips, or fails
// in CI (scripts/setup.sh installs it).
func requireTmux(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("tmux")
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("missing in CI: tmux (scripts/setup.sh installs it)")
	}
	t.Skip("needs tmux; run scripts/setup.sh as root")
	return ""
}

// tmuxPane is one detached tmux session, on a tmux server of its own,
// whose only pane runs a program on a terminal of tmux's: a user at a
// terminal, driven by send-keys and read by capture-pane. The pane stays
// when the program exits, so that its exit status can be read.
type tmuxPane struct {
	t                  *testing.T
	tmux, sock, status string
}

// recordsStatus is the pane's outer program: sh runs the rest of its
// arguments and writes their exit status to the file $1. tmux's own
// pane_dead_status is not reliable (tmux 3.3a leaves it empty when the
// program exits before the server has settled), so the tests read this
// file instead.
const recordsStatus = `f=$1; shift; "$@"; code=$?; echo "$code" >"$f.tmp" && mv "$f.tmp" "$f"; exit $code`

// startPane starts argv (exactly, no shell parsing it) in a rows×cols
// pane; the server is killed when the test ends.
func startPane(t *testing.T, tmux string, rows, cols int, argv ...string) *tmuxPane {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "tmux.conf")
	if err := os.WriteFile(conf, []byte("set-option -g remain-on-exit on\nset-option -g history-limit 10000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &tmuxPane{t: t, tmux: tmux, sock: filepath.Join(dir, "tmux.sock"), status: filepath.Join(dir, "status")}
	args := append([]string{"-f", conf, "new-session", "-d", "-s", "pty",
		"-x", strconv.Itoa(cols), "-y", strconv.Itoa(rows), "--", "/bin/sh", "-c", recordsStatus, "sh", p.status}, argv...)
	p.run(args...)
	t.Cleanup(func() { _ = p.command("kill-server").Run() })
	return p
}

func (p *tmuxPane) command(args ...string) *exec.Cmd {
	cmd := exec.Command(p.tmux, append([]string{"-S", p.sock}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TERM=xterm-256color"}
	return cmd
}

// run runs a tmux command and returns its output.
func (p *tmuxPane) run(args ...string) string {
	p.t.Helper()
	out, err := p.command(args...).CombinedOutput()
	if err != nil {
		p.t.Fatalf("tmux %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// typeLine types line and Enter.
func (p *tmuxPane) typeLine(line string) {
	p.t.Helper()
	p.run("send-keys", "-t", "pty", "-l", line)
	p.run("send-keys", "-t", "pty", "Enter")
}

// screen is the pane's whole text, history included, wrapped lines
// joined.
func (p *tmuxPane) screen() string {
	p.t.Helper()
	return p.run("capture-pane", "-p", "-J", "-S", "-", "-t", "pty")
}

// waitFor polls the screen until re matches, for at most 20 s.
func (p *tmuxPane) waitFor(what string, re *regexp.Regexp) {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s := p.screen()
		if re.MatchString(s) {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the pane never showed %s (%s); screen:\n%s", what, re, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exitStatus waits for the pane's program to exit, for at most 20 s,
// and returns its status.
func (p *tmuxPane) exitStatus() int {
	p.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		data, err := os.ReadFile(p.status)
		if err == nil {
			code, err := strconv.Atoi(strings.TrimSpace(string(data)))
			if err != nil {
				p.t.Fatalf("exit status file holds %q", data)
			}
			return code
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("the pane's program did not exit; screen:\n%s", p.screen())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// keepsTerminal is the pane's program for a terminal session: sh saves
// the terminal's settings (stty -g) to $1, runs the rest of its
// arguments, saves them again to $2 and exits with the command's status,
// so that a test sees whether the command put the terminal back.
const keepsTerminal = `before=$1 after=$2; shift 2; stty -g >"$before"; "$@"; code=$?; stty -g >"$after"; exit $code`

// TestExecTTY drives `dsh-sandbox exec -t -- bash` through tmux on every
// backend that gives a terminal (oci with runc and crun, docker,
// containerd): the command sees a /dev/pts terminal of the pane's size,
// answers what is typed, follows a resize of the pane (stty size), and
// its exit status (3) is exec's; the CLI's terminal settings are the
// same afterwards as before (raw mode undone). A policy with tty: false,
// runsc and a stdin that is no terminal are refused (exit 2) naming why.
func TestExecTTY(t *testing.T) {
	requireRoot(t)
	tmux := requireTmux(t)
	e := newEnv(t)
	base := append([]string{"exec"}, e.flags("")...)

	session := func(t *testing.T, args ...string) {
		dir := t.TempDir()
		before, after := filepath.Join(dir, "before"), filepath.Join(dir, "after")
		argv := append([]string{"/bin/sh", "-c", keepsTerminal, "sh", before, after, binary}, base...)
		argv = append(append(argv, args...), "-t", "--", "bash")
		p := startPane(t, tmux, 30, 100, argv...)
		p.typeLine("echo ready-$((20+22))")
		p.waitFor("bash's answer", regexp.MustCompile(`(?m)^ready-42\s*$`))
		// The pane's TERM (tmux's screen or tmux-*) reaches the call, not
		// the TERM=dumb of calls without a terminal.
		p.typeLine("echo term=$TERM")
		p.waitFor("the client's TERM", regexp.MustCompile(`(?m)^term=(screen|tmux)\S*\s*$`))
		// busybox has both applets on every image of the test (the host
		// one, and busybox plus bash).
		p.typeLine("busybox tty; echo $((6*7)); busybox stty size")
		p.waitFor("a /dev/pts terminal", regexp.MustCompile(`(?m)^/dev/pts/[0-9]+\s*$`))
		p.waitFor("42", regexp.MustCompile(`(?m)^42\s*$`))
		p.waitFor("the size 30×100", regexp.MustCompile(`(?m)^30 100\s*$`))

		p.run("resize-window", "-t", "pty", "-x", "120", "-y", "40")
		resized := regexp.MustCompile(`(?m)^40 120\s*$`)
		deadline := time.Now().Add(20 * time.Second)
		for !resized.MatchString(p.screen()) {
			if time.Now().After(deadline) {
				t.Fatalf("stty size inside never followed the resize to 40×120; screen:\n%s", p.screen())
			}
			p.typeLine("busybox stty size")
			time.Sleep(300 * time.Millisecond)
		}
		p.typeLine("exit 3")
		if code := p.exitStatus(); code != 3 {
			t.Errorf("exec -t -- bash; exit 3: exit status %d, want 3; screen:\n%s", code, p.screen())
		}
		b, errB := os.ReadFile(before)
		a, errA := os.ReadFile(after)
		if errB != nil || errA != nil || len(b) == 0 || string(a) != string(b) {
			t.Errorf("terminal settings after exec -t = %q (%v), before %q (%v): raw mode was not undone", a, errA, b, errB)
		}
	}
	refused := func(t *testing.T, want string, args ...string) {
		argv := append(append(append([]string{binary}, base...), args...), "-t", "--", "true")
		p := startPane(t, tmux, 30, 100, argv...)
		if code := p.exitStatus(); code != 2 {
			t.Errorf("exec %s -t: exit status %d, want 2; screen:\n%s", strings.Join(args, " "), code, p.screen())
		}
		if s := p.screen(); !strings.Contains(s, want) {
			t.Errorf("exec %s -t printed\n%s\nwant it to say %q", strings.Join(args, " "), s, want)
		}
	}

	t.Run("runc", func(t *testing.T) { session(t, "--runtime", "runc") })
	t.Run("crun", func(t *testing.T) { session(t, "--runtime", "crun") })
	t.Run("refused", func(t *testing.T) {
		pol := filepath.Join(filepath.Dir(e.root), "no-tty.yaml")
		if err := os.WriteFile(pol, []byte("name: no-tty\ntty: false\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		refused(t, "tty: false", "--policy", pol, "--runtime", "runc")
		refused(t, "oci (runsc): cannot run a call on a terminal", "--runtime", "runsc")
		r := run(t, nil, append(base, "-t", "--", "true")...)
		if r.code != 2 || !strings.Contains(r.stderr, "the input device is not a terminal") {
			t.Errorf("exec -t with no terminal on stdin = %d, %q; want 2 and \"the input device is not a terminal\"", r.code, r.stderr)
		}
	})
	t.Run("daemons", func(t *testing.T) {
		requireDaemons(t)
		name := "dsh-itest-pty:1"
		importEverywhere(t, e, testImageTar(t), name)
		for _, b := range []string{"docker", "containerd"} {
			t.Run(b, func(t *testing.T) {
				session(t, append(daemonFlags(), "--backend", b, "--image", name)...)
			})
		}
	})
}
