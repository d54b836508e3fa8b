//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// example says how TestExamples treats one command of README.md's sh
// blocks (the key is the command as written, continuation lines joined,
// the trailing comment dropped, white space collapsed).
type example struct {
	// code is the expected exit status.
	code int
	// want must appear in the command's stdout or stderr: its key line.
	want string
	// listed, when set, is why the command is not run: the test only
	// checks that the README still has it.
	listed string
	// how names a way of running it other than `sh -c` in the scratch
	// home: background (serve), tty (in a tmux pane), jobID or callID
	// (ID replaced by a job id of exec --detach or a call id of calls).
	how string
}

// readmeExamples is the table of every command README.md's sh blocks
// show. A command without an entry fails the test, and so does an entry
// whose command the README no longer has.
var readmeExamples = map[string]example{
	// The two commands.
	`./scripts/demo.sh`: {listed: "installs packages through apt and sets up the host; CI runs the same steps through scripts/test.sh"},
	`./scripts/test.sh`: {listed: "the whole suite, this test included"},

	// Quickstart.
	`eval "$(./scripts/daemons.sh start)"`:                                             {listed: "the daemons are shared and scripts/test.sh has started them; the test takes DOCKER_HOST and DSH_SANDBOX_TEST_CONTAINERD, what this line sets, from its own environment"},
	`go build -o /usr/local/bin/dsh-sandbox ./cmd/dsh-sandbox`:                         {listed: "the test builds the binary the same way into a temporary directory first on PATH (never /usr/local/bin)"},
	`CGO_ENABLED=0 go build -o /usr/local/bin/dsh-sandbox-stub ./cmd/dsh-sandbox-stub`: {listed: "the test builds the stub the same way next to its binary (never /usr/local/bin)"},
	`mkdir -p ~/proj/.claude ~/datasets/x && cd ~/proj`:                                {},
	`echo 'a,b' > ~/datasets/x/train.csv`:                                              {},
	`printf 'GREETING=hello\n' > ci.env`:                                               {},
	`printf 'test:\n\t@echo "$$GREETING, tests pass"\n' > Makefile`:                    {},
	`printf '%s\n' '{"hooks":{"PreToolUse":[{"matcher":"*","hooks":[{"type":"command","command":"echo refused by the hook >&2; exit 2"}]}]}}' > .claude/settings.json`: {},
	`printf 'name: data\nmountRoots:\n - {path: %s/datasets, mode: ro}\n' "$HOME" > ~/data.yaml`:                                                                       {},
	`dsh-sandbox images build --output ~/busybox.tar`:                                                                                                                  {want: "wrote "},

	// Using it.
	`dsh-sandbox exec --session-id s1 --cwd ~/proj -- 'env | grep ^DSH_'`: {want: "DSH_SESSION_ID=s1"},
	`dsh-sandbox exec --runtime crun --policy read-only -- 'ls'`:          {want: "ci.env"},
	`dsh-sandbox locate --session-id s1 --cwd ~/proj`:                     {want: "/s1/session.jsonl.zstd"},
	`dsh-sandbox env show --session-id s1`:                                {want: "DSH_SHELL=1"},
	`dsh-sandbox policy check workspace-write`:                            {want: "policy workspace-write"},
	`dsh-sandbox serve`: {how: "background", want: `"message":"stopped"`},
	`dsh-sandbox exec --server unix://$HOME/.dsh/run/sandbox.sock -- 'id'`:   {want: "uid=0(root)"},
	`dsh-sandbox exec --detach -- 'sleep 30; echo done'`:                     {want: "bash-"},
	`dsh-sandbox jobs; dsh-sandbox jobs output ID; dsh-sandbox jobs kill ID`: {how: "jobID", want: "killed bash-"},
	`dsh-sandbox calls; dsh-sandbox calls kill ID`:                           {how: "callID", want: "killed call-"},
	`dsh-sandbox hooks run --dialect claude-code --config .claude/settings.json --event PreToolUse --policy workspace-write --session-id s1 --tool-name bash --tool-input '{"command":"rm -rf /"}'`: {code: 2, want: "reason: refused by the hook"},
	`dsh-sandbox exec -- printf '%s\n' 'c;d'`: {want: "c;d"},
	`echo hello | dsh-sandbox exec -- cat`:    {want: "hello"},
	`dsh-sandbox exec -t -- bash`:             {how: "tty", code: 3, want: "42"},
	`dsh-sandbox exec --memory 256Mi --pids 64 --timeout 30s --env-file ci.env -- 'make test'`:                                          {want: "hello, tests pass"},
	`dsh-sandbox exec --policy ~/data.yaml --mount ~/datasets/x:/data:ro -- 'ls /data'`:                                                 {want: "train.csv"},
	`dsh-sandbox --config /etc/dsh-sandbox/config.yaml serve`:                                                                           {listed: "the file lies in /etc, which the test never writes; TestContribConfigServesAndExecs serves contrib/dsh-sandbox.yaml, the example it names"},
	`dsh-sandbox images build --name busybox:1 --add bash --add jq`:                                                                     {want: "imported busybox:1 into oci"},
	`dsh-sandbox images import --name busybox:1 --backend docker ~/busybox.tar`:                                                         {want: "imported busybox:1 into docker"},
	`dsh-sandbox images list --backend docker`:                                                                                          {want: "busybox:1 "},
	`dsh-sandbox exec --backend docker --image busybox:1 -- 'id'`:                                                                       {want: "uid=0(root)"},
	`dsh-sandbox images import --name busybox:1 --backend containerd --containerd-address "$DSH_SANDBOX_TEST_CONTAINERD" ~/busybox.tar`: {want: "imported busybox:1 into containerd"},
	`dsh-sandbox exec --backend containerd --containerd-address "$DSH_SANDBOX_TEST_CONTAINERD" --image busybox:1 -- 'id'`:               {want: "uid=0(root)"},
	`dsh-sandbox images rm --backend docker busybox:1`:                                                                                  {want: "removed busybox:1 from docker"},
	`dsh-sandbox doctor`: {want: "deployment: usable"},
	`dsh-sandbox bench`:  {want: "RSS growth while streaming"},
	`dsh-sandbox reap`:   {},
}

// TestExamples runs README.md's commands as written, in order, in a
// scratch home: HOME, the state and data directories and the containerd
// namespace are the test's own, the binary built for this run is first on
// PATH, and the docker and containerd daemons are the ones scripts/test.sh
// started. Each command's exit status and key line are compared with
// readmeExamples. The Quickstart block creates what the others need.
func TestExamples(t *testing.T) {
	requireRoot(t)
	requireDaemonEnv(t)
	cmds := readmeCommands(t, filepath.Join("..", "README.md"))
	seen := map[string]bool{}
	for _, rc := range cmds {
		if _, ok := readmeExamples[rc.key]; !ok {
			t.Errorf("README.md command without an entry in readmeExamples (say how it is checked, or why not):\n  %s", rc.key)
		}
		seen[rc.key] = true
	}
	for c := range readmeExamples {
		if !seen[c] {
			t.Errorf("readmeExamples entry whose command README.md no longer has:\n  %s", c)
		}
	}
	if t.Failed() {
		return
	}

	base := t.TempDir()
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(base, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	sh := &exampleShell{t: t, dir: home, pwdFile: filepath.Join(base, "pwd"), env: []string{
		"HOME=" + home,
		"PATH=" + filepath.Dir(binary) + ":" + os.Getenv("PATH"),
		"DSH_SANDBOX_STATE_DIR=" + filepath.Join(base, "state"),
		"DSH_SANDBOX_DATA_DIR=" + filepath.Join(base, "data"),
		"DSH_SANDBOX_CONTAINERD_NAMESPACE=dsh-sandbox-examples",
		"DOCKER_HOST=" + os.Getenv("DOCKER_HOST"),
		"DSH_SANDBOX_TEST_CONTAINERD=" + os.Getenv("DSH_SANDBOX_TEST_CONTAINERD"),
	}}
	t.Cleanup(func() {
		// What a failed run may leave in the shared daemons.
		sh.quiet("dsh-sandbox images rm --backend docker busybox:1")
		sh.quiet(`dsh-sandbox images rm --backend containerd --containerd-address "$DSH_SANDBOX_TEST_CONTAINERD" busybox:1`)
	})

	var ran, listed int
	var serve *exec.Cmd
	var serveOut *syncBuffer
	var jobID string
	for _, rc := range cmds {
		ex, c := readmeExamples[rc.key], rc.text
		if ex.listed != "" {
			listed++
			t.Logf("listed, not run: %s\n    because: %s", c, ex.listed)
			continue
		}
		ran++
		var r result
		switch ex.how {
		case "":
			r = sh.run(c)
		case "background":
			serve, serveOut = sh.start(c)
			sock := filepath.Join(home, ".dsh", "run", "sandbox.sock")
			waitForPath(t, sock, serveOut)
			t.Logf("started in the background: %s", c)
			continue // checked when it is stopped, below
		case "jobID":
			r = sh.run(strings.ReplaceAll(c, "ID", jobID))
		case "callID":
			// A call must run for calls to list and calls kill to stop.
			d := sh.run("dsh-sandbox exec --detach -- 'sleep 30'")
			if d.code != 0 {
				t.Fatalf("exec --detach for calls kill: exit %d: %s", d.code, d.stderr)
			}
			l := sh.run("dsh-sandbox calls")
			id := regexp.MustCompile(`call-[0-9a-f]+`).FindString(l.stdout)
			if id == "" {
				t.Fatalf("calls lists no call: %s%s", l.stdout, l.stderr)
			}
			r = sh.run(strings.ReplaceAll(c, "ID", id))
		case "tty":
			r = sh.tty(c, "echo $((6*7)); exit 3", regexp.MustCompile(`(?m)^42\s*$`))
		default:
			t.Fatalf("unknown how %q of %s", ex.how, c)
		}
		checkExample(t, c, ex, r)
		if strings.Contains(c, "--detach") {
			jobID = strings.TrimSpace(r.stdout)
		}
	}
	if serve != nil {
		if err := serve.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		code := exitStatus(t, serve.Wait(), "dsh-sandbox serve")
		checkExample(t, "dsh-sandbox serve", readmeExamples["dsh-sandbox serve"], result{stderr: serveOut.String(), code: code})
	}
	t.Logf("README.md: %d commands, %d run, %d listed with a reason", len(cmds), ran, listed)
}

// checkExample compares r with what ex expects of command c.
func checkExample(t *testing.T, c string, ex example, r result) {
	t.Helper()
	if r.code != ex.code || !strings.Contains(r.stdout+r.stderr, ex.want) {
		t.Errorf("README.md example failed as written:\n  %s\nexit %d, want %d; output should hold %q\nstdout:\n%s\nstderr:\n%s",
			c, r.code, ex.code, ex.want, r.stdout, r.stderr)
	}
}

// requireDaemonEnv fails in CI, and skips elsewhere, when the docker and
// containerd daemons' addresses are not in the environment.
func requireDaemonEnv(t *testing.T) {
	t.Helper()
	if os.Getenv("DOCKER_HOST") != "" && os.Getenv("DSH_SANDBOX_TEST_CONTAINERD") != "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("missing in CI: DOCKER_HOST and DSH_SANDBOX_TEST_CONTAINERD (scripts/daemons.sh start prints them)")
	}
	t.Skip(`needs the daemons: eval "$(scripts/daemons.sh start)"`)
}

// readmeCommand is one command of an sh block: text as written (a line
// ending in a backslash joined with the next, the trailing comment cut)
// and key, its white space collapsed.
type readmeCommand struct{ text, key string }

// readmeCommands returns the commands of file's sh blocks; comment lines
// are dropped.
func readmeCommands(t *testing.T, file string) []readmeCommand {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cmds []readmeCommand
	in := false
	pending := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !in && trimmed == "```sh":
			in = true
			continue
		case in && trimmed == "```":
			if pending != "" {
				t.Fatalf("%s: an sh block ends in a continuation line: %s", file, pending)
			}
			in = false
			continue
		case !in:
			continue
		}
		line = strings.TrimSpace(cutComment(line))
		if line == "" {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			pending += strings.TrimSuffix(line, `\`) + " "
			continue
		}
		text := pending + line
		cmds = append(cmds, readmeCommand{text: text, key: strings.Join(strings.Fields(text), " ")})
		pending = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if in {
		t.Fatalf("%s: an sh block is not closed", file)
	}
	return cmds
}

// cutComment drops a shell comment: a # at the start of a word outside
// quotes, and what follows it.
func cutComment(line string) string {
	var quote rune
	prev := ' '
	for i, r := range line {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (prev == ' ' || prev == '\t'):
			return line[:i]
		}
		prev = r
	}
	return line
}

// exampleShell runs commands as a user at a shell would: one after the
// other, each in the directory the previous one left.
type exampleShell struct {
	t       *testing.T
	dir     string
	pwdFile string
	env     []string
}

// script is c followed by what records the directory it leaves, keeping
// c's exit status.
func (s *exampleShell) script(c string) string {
	return "cd \"$1\" || exit 99\n" + c + "\n__rc=$?; pwd >\"$2\"; exit $__rc\n"
}

func (s *exampleShell) command(c string) *exec.Cmd {
	cmd := exec.Command("/bin/sh", "-c", s.script(c), "sh", s.dir, s.pwdFile)
	cmd.Env = s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// run runs c to its end.
func (s *exampleShell) run(c string) result {
	s.t.Helper()
	cmd := s.command(c)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	code := exitStatus(s.t, cmd.Run(), c)
	if data, err := os.ReadFile(s.pwdFile); err == nil {
		s.dir = strings.TrimSpace(string(data))
	}
	return result{stdout.String(), stderr.String(), code}
}

// quiet runs c and ignores how it ends.
func (s *exampleShell) quiet(c string) { _ = s.command(c).Run() }

// start starts c, a simple command, in the background: the shell execs
// it, so that a signal to the process is one to the command. The caller
// stops it.
func (s *exampleShell) start(c string) (*exec.Cmd, *syncBuffer) {
	s.t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "cd \"$1\" || exit 99\nexec "+c, "sh", s.dir)
	cmd.Env = s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out := &syncBuffer{}
	out.w = &out.buf
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return cmd, out
}

// syncBuffer is a buffer a process writes while the test reads it.
type syncBuffer struct {
	lockedWriter
	buf bytes.Buffer
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// tty runs c on a terminal (a tmux pane), types input, waits for the
// screen to match want and returns the exit status, the screen as
// stdout.
func (s *exampleShell) tty(c, input string, want *regexp.Regexp) result {
	s.t.Helper()
	argv := append([]string{"env", "-i"}, s.env...)
	argv = append(argv, "TERM=xterm", "/bin/sh", "-c", "cd \"$1\" && "+c, "sh", s.dir)
	p := startPane(s.t, requireTmux(s.t), 24, 80, argv...)
	p.waitFor("a prompt", regexp.MustCompile(`(?m)[#$] *$`))
	p.typeLine(input)
	p.waitFor("the answer", want)
	code := p.exitStatus()
	return result{stdout: p.screen(), code: code}
}

// waitForPath waits up to 20 s for path to exist.
func waitForPath(t *testing.T, path string, log fmt.Stringer) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			return
		}
	}
	t.Fatalf("%s never appeared; output:\n%s", path, log)
}
