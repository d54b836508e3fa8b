//go:build dshinterop

package dshinterop

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCLIDefaultsMatchDsh: with default settings (no --home, no
// --sessions-root, no --compression; HOME set, DSH_HOME unset) the CLI's
// `locate`, `env show` and `hooks run --dry-run` give what a default dsh
// gives for the same header: the same transcript path (zstd, under
// ~/.dsh/sessions, the header's cwd as written), the same DSH_* snapshot
// and the same hook stdin bytes. $DSH_INTEROP_CLI_CASES cases (default
// 200: every case runs the binary three times).
func TestCLIDefaultsMatchDsh(t *testing.T) {
	n := 200
	if v := os.Getenv("DSH_INTEROP_CLI_CASES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 {
			t.Fatalf("DSH_INTEROP_CLI_CASES=%q: want a positive integer", v)
		}
	}
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(tmp, "home")
	procCwd := filepath.Join(tmp, "cwd")
	// Directories a hook call without an agent names with --cwd: dsh's
	// process would run there, so its payload's cwd is that directory.
	elsewhere := []string{filepath.Join(tmp, "elsewhere"), filepath.Join(tmp, "else where", "sub")}
	for _, dir := range append([]string{home, procCwd}, elsewhere...) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	hookConfig := filepath.Join(tmp, "hooks.json")
	if err := os.WriteFile(hookConfig, []byte(`{"hooks":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(tmp, "dsh-sandbox")
	build := exec.Command("go", "build", "-o", bin, "github.com/dsh-sandbox/dsh-sandbox/cmd/dsh-sandbox")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// Both sides see the same HOME and no DSH_* variable.
	t.Setenv("HOME", home)
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(strings.ToUpper(kv), "DSH_") {
			env = append(env, kv)
		}
	}
	t.Setenv("DSH_HOME", "")
	os.Unsetenv("DSH_HOME")
	d := startDriver(t)
	r := newRand(t, "cli")
	sessions := filepath.Join(home, ".dsh", "sessions")
	cli := func(args ...string) (string, error) {
		cmd := exec.Command(bin, args...)
		cmd.Dir, cmd.Env = procCwd, env
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("dsh-sandbox %q: %v: %s", args, err, stderr.String())
		}
		return stdout.String(), nil
	}
	type cliCase struct {
		args                  []string // the session flags
		locate, envShow, hook string
		hookEvent             string
		err                   error
	}
	ccs := make([]cliCase, n)
	var cases []map[string]any
	for i := range ccs {
		id := strings.ReplaceAll(randShort(r), "\x00", "")
		for id == "" || strings.HasPrefix(id, "-") {
			id = "s" + strings.ReplaceAll(randShort(r), "\x00", "")
		}
		header := map[string]any{"version": 0, "id": id, "createdAt": 0, "delegationDepth": 0}
		args := []string{"--session-id", id}
		switch r.IntN(6) {
		case 0:
			args = append(args, "--no-cwd")
		case 1:
			header["cwd"] = procCwd
		default:
			cwd := strings.ReplaceAll(randPath(r), "\x00", "")
			if r.IntN(3) == 0 {
				cwd += "/"
			}
			args = append(args, "--cwd", cwd)
			header["cwd"] = cwd
		}
		cc := cliCase{args: args}
		if cc.locate, cc.err = cli(append([]string{"locate"}, args...)...); cc.err == nil {
			// --json: a value may hold a newline, which KEY=VALUE lines cannot show.
			cc.envShow, cc.err = cli(append([]string{"env", "show", "--json"}, args...)...)
		}
		dialect := []string{"claude-code", "codex"}[r.IntN(2)]
		events := []string{"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"}
		if dialect == "claude-code" {
			events = append(events, "SubagentStart", "SubagentStop")
		}
		event := events[r.IntN(len(events))]
		turn := r.IntN(20)
		input := randObject(r, 0, true)
		prompt, response := randString(r), randString(r)
		// A tool event may come without an agent: no --session-id, and
		// --cwd names the directory the harness runs in.
		noAgent := (event == "PreToolUse" || event == "PostToolUse") && r.IntN(3) == 0
		hookSession, hookCwd := args, procCwd
		if noAgent {
			hookCwd = elsewhere[r.IntN(len(elsewhere))]
			hookSession, turn = []string{"--cwd", hookCwd}, 0 // dsh's turn without an agent
		}
		hookArgs := append([]string{"hooks", "run", "--dry-run", "--dialect", dialect, "--config", hookConfig, "--event", event,
			"--tool-input", input, "--tool-use-id", "toolu_1", "--tool-response", response, "--prompt", prompt,
			"--turn-id", strconv.Itoa(turn), "--source", "resume"}, hookSession...)
		if !strings.Contains(prompt+response, "\x00") && cc.err == nil {
			cc.hook, cc.err = cli(hookArgs...)
		}
		cc.hookEvent = dialect + " " + event
		ccs[i] = cc
		hook := map[string]any{"op": "hook", "dialect": dialect, "event": event, "root": sessions, "cwd": hookCwd, "turn": turn,
			"header": header, "childHeader": header, "agentId": id, "toolName": "Bash", "toolInput": input,
			"toolUseId": "toolu_1", "toolResponse": response, "prompt": prompt, "source": "resume"}
		if noAgent {
			cc.hookEvent += " without an agent"
			ccs[i] = cc
			delete(hook, "header")
			delete(hook, "childHeader")
		}
		cases = append(cases,
			map[string]any{"op": "locate", "root": sessions, "id": id, "cwd": header["cwd"]},
			map[string]any{"op": "shellEnv", "root": sessions, "header": header},
			hook)
	}
	res := d.run(t, cases)
	diffs := newDifferences("cli", n)
	noAgentCases := 0
	for i, cc := range ccs {
		loc, env, hook := res[3*i], res[3*i+1], res[3*i+2]
		if cc.err != nil {
			if strings.ContainsRune(strings.Join(cc.args, ""), 0) {
				continue
			}
			diffs.add(fmt.Sprintf("%v: %v", cc.args, cc.err))
			continue
		}
		var l struct {
			Kind string `json:"kind"`
			Path string `json:"path"`
		}
		_ = json.Unmarshal(loc.raw, &l)
		if want := fmt.Sprintf(`{"kind":"jsonl","path":%s}`, mustJSON(l.Path)); !loc.OK || strings.TrimSpace(cc.locate) != want {
			diffs.add(fmt.Sprintf("locate %q\n  dsh:  %s  ours: %s", cc.args, loc.raw, cc.locate))
		}
		var e struct {
			Env map[string]string `json:"env"`
		}
		_ = json.Unmarshal(env.raw, &e)
		// `env show --json` prints the service's snapshot body:
		// {"env": ["KEY=VALUE", …]}, sorted.
		var shown struct {
			Env []string `json:"env"`
		}
		err := json.Unmarshal([]byte(cc.envShow), &shown)
		got := map[string]string{}
		for _, kv := range shown.Env {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				err = fmt.Errorf("entry %q is not KEY=VALUE", kv)
			}
			got[k] = v
		}
		if err != nil || !env.OK || !maps.Equal(got, e.Env) {
			diffs.add(fmt.Sprintf("env show --json %q\n  dsh:  %q  ours: %s", cc.args, e.Env, cc.envShow))
		}
		if cc.hook == "" {
			continue
		}
		var h struct {
			Stdin string `json:"stdin"`
		}
		_ = json.Unmarshal(hook.raw, &h)
		if !hook.OK || h.Stdin != cc.hook {
			diffs.add(fmt.Sprintf("hooks run --dry-run %s %q\n  dsh:  %q\n  ours: %q", cc.hookEvent, cc.args, h.Stdin, cc.hook))
		} else if strings.HasSuffix(cc.hookEvent, "without an agent") {
			noAgentCases++
		}
	}
	t.Logf("cli: %d hook cases without an agent, with --cwd", noAgentCases)
	if noAgentCases == 0 && n >= 100 {
		t.Errorf("cli: no hook case without an agent: the generator no longer covers --cwd without --session-id")
	}
	diffs.report(t)
}
