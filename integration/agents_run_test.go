//go:build integration

package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// Codex CLI and Claude Code, pinned in integrations/codex and
// integrations/claude-code (npm ci --ignore-scripts from
// scripts/setup.sh: each ships its native Linux binary in a platform
// package, run here directly), drive `dsh-sandbox mcp` configured as
// docs/mcp.md says, keyless, against `dsh-sandbox replay-model`. Each
// runs in a network namespace of its own with only loopback, its proxy
// variables pointing at the replay model, which records (and refuses)
// anything but model requests: the tests fail if an agent tries another
// address. The same turn records the agent's own hook payloads, which
// are compared with what `dsh-sandbox hooks run --dry-run` builds.

// agentSandbox is one agent run's places: a private HOME (the agent's
// configuration and the dsh home ~/.dsh), a workspace it starts in, the
// directory its recording hooks write to, and the network namespace.
type agentSandbox struct {
	home, work, hookDir, recordFile string
	netns                           string // /proc/PID/ns/net of the holder
	bin                             string // a directory with dsh-sandbox, put first on PATH
}

// requireAgent returns the agent's binary under integrations/PKG, or
// skips (fails in CI) when scripts/setup.sh has not installed it.
func requireAgent(t *testing.T, pkg string, rel ...string) string {
	t.Helper()
	requireRoot(t)
	path, err := filepath.Abs(filepath.Join(append([]string{"..", "integrations", pkg, "node_modules"}, rel...)...))
	if err != nil {
		t.Fatal(err)
	}
	var missing []string
	if _, err := os.Stat(path); err != nil {
		missing = append(missing, path)
	}
	for _, tool := range []string{"unshare", "nsenter", "ip"} {
		if _, err := exec.LookPath(tool); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("missing in CI: %s (scripts/setup.sh runs npm ci in integrations/%s)", strings.Join(missing, ", "), pkg)
		}
		t.Skipf("needs %s; run scripts/setup.sh", strings.Join(missing, ", "))
	}
	return path
}

// newAgentSandbox makes the directories and a network namespace with only
// loopback, held by a process stopped at cleanup.
func newAgentSandbox(t *testing.T) *agentSandbox {
	t.Helper()
	base := t.TempDir()
	// The oci backend's mapped container root must search the
	// workspace's ancestors (t.TempDir makes them 0700).
	for _, d := range []string{filepath.Dir(base), base} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	s := &agentSandbox{
		home:       filepath.Join(base, "home"),
		work:       filepath.Join(base, "work"),
		hookDir:    filepath.Join(base, "hook-payloads"),
		recordFile: filepath.Join(base, "requests.jsonl"),
		bin:        filepath.Dir(binary),
	}
	for _, d := range []string{s.home, s.agentBin(), s.work, s.hookDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	holder := exec.Command("unshare", "--net", "sleep", "3600")
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = holder.Process.Kill()
		_ = holder.Wait()
	})
	s.netns = fmt.Sprintf("/proc/%d/ns/net", holder.Process.Pid)
	// unshare has to get there first: wait for the namespace to differ.
	self, _ := os.Readlink("/proc/self/ns/net")
	for i := 0; ; i++ {
		if ns, err := os.Readlink(s.netns); err == nil && ns != self {
			break
		}
		if i == 100 {
			t.Fatal("unshare --net did not make a namespace")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if out, err := exec.Command("nsenter", "--net="+s.netns, "ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v: %s", err, out)
	}
	return s
}

// in returns a command that runs argv in the namespace.
func (s *agentSandbox) in(ctx context.Context, argv ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + s.netns, "--"}, argv...)...)
}

// startReplay starts replay-model with script inside the namespace and
// returns its base URL (…/v1).
func (s *agentSandbox) startReplay(t *testing.T, script any) string {
	t.Helper()
	data, err := json.Marshal(script)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(filepath.Dir(s.recordFile), "script.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return serveReplayModel(t, s.in(context.Background(), binary, "replay-model", "--script", path, "--record", s.recordFile))
}

// agentBin is a directory for the agent's own commands, first on PATH.
func (s *agentSandbox) agentBin() string { return filepath.Join(s.home, "bin") }

// env is the agent's environment: PATH with the agent's commands and
// dsh-sandbox first, the
// private HOME, and every proxy variable pointing at the replay model.
func (s *agentSandbox) env(base string, extra ...string) []string {
	proxy := strings.TrimSuffix(base, "/v1")
	env := []string{
		"PATH=" + strings.Join([]string{s.agentBin(), s.bin, os.Getenv("PATH")}, string(os.PathListSeparator)),
		"HOME=" + s.home,
		"TMPDIR=" + filepath.Dir(s.recordFile),
		"HTTPS_PROXY=" + proxy, "HTTP_PROXY=" + proxy, "ALL_PROXY=" + proxy,
		"https_proxy=" + proxy, "http_proxy=" + proxy, "all_proxy=" + proxy,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost",
	}
	return append(env, extra...)
}

// runAgent runs argv in the namespace and workspace, with a deadline.
func (s *agentSandbox) runAgent(t *testing.T, env []string, argv ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := s.in(ctx, argv...)
	cmd.Dir = s.work
	cmd.Env = env
	cmd.Stdin = strings.NewReader("")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		t.Fatalf("%s: %v\nstdout:\n%s\nstderr:\n%s", filepath.Base(argv[0]), err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

// replayRecord is a line of replay-model's --record file.
type replayRecord struct {
	Seq      int             `json:"seq"`
	Method   string          `json:"method"`
	Path     string          `json:"path"`
	Query    string          `json:"query"`
	Host     string          `json:"host"`
	Body     json.RawMessage `json:"body"`
	Response int             `json:"response"`
	Error    string          `json:"error"`
}

// modelRequests reads the record, fails on any request that is not to
// the model endpoint (another address through the proxy, another path),
// and returns the model requests.
func (s *agentSandbox) modelRequests(t *testing.T, endpoint string) []replayRecord {
	t.Helper()
	data, err := os.ReadFile(s.recordFile)
	if err != nil {
		t.Fatal(err)
	}
	var out []replayRecord
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var r replayRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("record line %q: %v", line, err)
		}
		if r.Host != "" || r.Path != endpoint || r.Error != "" {
			t.Errorf("the agent tried something besides its model: %s %s%s (%s)", r.Method, r.Host, r.Path, r.Error)
			continue
		}
		out = append(out, r)
	}
	return out
}

// mcpScript is the scripted conversation both agents play: tool(name)
// names our MCP tool as the agent offers it, builtin is the agent's own
// shell tool call (for the hook comparison; it should take a while, so
// that the job has ended when job_output reads it). The model runs a foreground
// bash call, starts a background job, makes a refused call (a relative
// workdir), calls the agent's own shell tool, reads the job's output
// through job_output (its id captured from the background call's result)
// and ends.
func mcpScript(tool func(name string) map[string]any, builtin map[string]any) map[string]any {
	call := func(id, name string, args map[string]any) map[string]any {
		c := tool(name)
		c["id"], c["arguments"] = id, args
		return c
	}
	output := call("call_output", "job_output", map[string]any{})
	output["capture"] = map[string]string{"job_id": "bash-[0-9a-f]{16}"}
	return map[string]any{"responses": []any{
		map[string]any{"content": "Looking at the session's facts.", "tool_calls": []any{
			call("call_env", "bash", map[string]any{"command": "env | grep ^DSH_ | sort"})}},
		map[string]any{"content": "Starting a job.", "tool_calls": []any{
			call("call_bg", "bash", map[string]any{"command": "echo job-started; echo job-finished", "run_in_background": true})}},
		map[string]any{"content": "A call the server refuses.", "tool_calls": []any{
			call("call_bad", "bash", map[string]any{"command": "ls", "workdir": "relative/dir"})}},
		map[string]any{"content": "And my own shell.", "tool_calls": []any{builtin}},
		map[string]any{"content": "Reading the job.", "tool_calls": []any{output}},
		map[string]any{"content": "All done."},
	}}
}

// checkMCPTurn checks the model requests of a run of mcpScript: each
// tool's result reached the model in the next request (result(body, id)
// finds it), the call ran in the sandbox with the session's DSH_* facts,
// (the session my-session of docs/mcp.md, in the dsh home dshHome), the
// refusal came back naming the argument (marked as a tool error when the
// wire format can say so: markedErrors), and the job's output was read.
func checkMCPTurn(t *testing.T, reqs []replayRecord, dshHome string, markedErrors bool, result func(t *testing.T, body json.RawMessage, id string) (string, bool)) {
	t.Helper()
	if len(reqs) != 6 {
		t.Fatalf("%d model requests, want 6 (one per scripted response)", len(reqs))
	}
	for i, r := range reqs {
		if r.Response != i {
			t.Errorf("request %d was answered by response %d", i+1, r.Response)
		}
	}
	env, isErr := result(t, reqs[1].Body, "call_env")
	for _, want := range []string{"DSH_SHELL=1", "DSH_SESSION_ID=my-session", "DSH_HOME=" + dshHome, "DSH_SESSION_JSONL=" + dshHome + "/sessions/", "/my-session/session.jsonl.zstd", `"containerId":"call-`} {
		if !strings.Contains(env, want) || isErr {
			t.Errorf("the bash call's result %q (error %v) lacks %q", env, isErr, want)
		}
	}
	bg, isErr := result(t, reqs[2].Body, "call_bg")
	if !regexp.MustCompile(`bash-[0-9a-f]{16}`).MatchString(bg) || isErr {
		t.Errorf("the background call's result %q (error %v), want a job id", bg, isErr)
	}
	bad, isErr := result(t, reqs[3].Body, "call_bad")
	if isErr != markedErrors || !strings.Contains(bad, `invalid argument workdir: "relative/dir" is not an absolute path`) {
		t.Errorf("the refused call's result %q (error %v), want the refusal naming workdir (error %v)", bad, isErr, markedErrors)
	}
	out, isErr := result(t, reqs[5].Body, "call_output")
	if isErr || !strings.Contains(out, "job-started") || !strings.Contains(out, "job-finished") {
		t.Errorf("job_output's result %q (error %v), want the job's output", out, isErr)
	}
}

// docBlock returns the body of the first fenced block of language lang
// after the heading in docs/mcp.md.
func docBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "docs", "mcp.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/mcp.md has no heading %q", heading)
	}
	_, block, ok := strings.Cut(after, "```"+lang+"\n")
	if !ok {
		t.Fatalf("docs/mcp.md: no %s block after %q", lang, heading)
	}
	block, _, ok = strings.Cut(block, "```")
	if !ok {
		t.Fatalf("docs/mcp.md: unterminated block after %q", heading)
	}
	return block
}

// recordingHooks writes a hook configuration in the Claude Code/Codex
// grammar with one command hook per event that saves its stdin, byte for
// byte, to the sandbox's hook directory, and returns it.
func (s *agentSandbox) recordingHooks(t *testing.T, events []string, matcher string) map[string]any {
	t.Helper()
	script := filepath.Join(filepath.Dir(s.recordFile), "record-hook")
	// $1 is the event; the file name sorts in the order the hooks ran.
	body := "#!/bin/sh\nexec cat > \"" + s.hookDir + "/$(date +%s%N)-$1.json\"\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	groups := map[string]any{}
	for _, ev := range events {
		g := map[string]any{"hooks": []any{map[string]any{"type": "command", "command": script + " " + ev}}}
		if matcher != "" && slices.Contains([]string{"PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest", "PermissionDenied"}, ev) {
			g["matcher"] = matcher
		}
		groups[ev] = []any{g}
	}
	return map[string]any{"hooks": groups}
}

// hookPayload is one recorded hook stdin.
type hookPayload struct {
	event string
	raw   []byte
	keys  []string
	value map[string]json.RawMessage
}

// recordedPayloads reads the payloads the agent's hooks saved, in the
// order they ran.
func (s *agentSandbox) recordedPayloads(t *testing.T) []hookPayload {
	t.Helper()
	entries, err := os.ReadDir(s.hookDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []hookPayload
	for _, e := range entries { // ReadDir sorts by name: by time
		raw, err := os.ReadFile(filepath.Join(s.hookDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		_, event, _ := strings.Cut(strings.TrimSuffix(e.Name(), ".json"), "-")
		p, err := parsePayload(event, raw)
		if err != nil {
			t.Fatalf("hook payload %s: %v: %q", e.Name(), err, raw)
		}
		out = append(out, p)
	}
	return out
}

// parsePayload reads a payload's top-level keys in order.
func parsePayload(event string, raw []byte) (hookPayload, error) {
	p := hookPayload{event: event, raw: raw}
	if err := json.Unmarshal(raw, &p.value); err != nil {
		return p, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return p, err
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return p, err
		}
		p.keys = append(p.keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return p, err
		}
	}
	return p, nil
}

// str is a payload's string field, "" when absent or not a string.
func (p hookPayload) str(key string) string {
	var s string
	_ = json.Unmarshal(p.value[key], &s)
	return s
}

// jsonType names the JSON type of raw.
func jsonType(raw json.RawMessage) string {
	switch t := bytes.TrimSpace(raw); {
	case len(t) == 0:
		return "absent"
	case t[0] == '"':
		return "string"
	case t[0] == '{':
		return "object"
	case t[0] == '[':
		return "array"
	case string(t) == "null":
		return "null"
	case string(t) == "true" || string(t) == "false":
		return "boolean"
	default:
		return "number"
	}
}

// dryRunArgs are the `hooks run` flags that give dsh-sandbox the facts of
// the agent's payload p.
func dryRunArgs(p hookPayload, dialect, config, home string) []string {
	args := []string{"hooks", "run", "--dialect", dialect, "--config", config, "--event", p.event,
		"--dry-run", "--json", "--home", home, "--session-id", p.str("session_id"), "--cwd", p.str("cwd")}
	if name := p.str("tool_name"); name != "" {
		if name == "Bash" {
			name = "bash" // dsh's name; the dialect presents it as Bash
		}
		args = append(args, "--tool-name", name, "--tool-input", string(p.value["tool_input"]), "--tool-use-id", p.str("tool_use_id"))
	}
	if r, ok := p.value["tool_response"]; ok {
		text := p.str("tool_response")
		if jsonType(r) != "string" {
			text = string(r)
		}
		args = append(args, "--tool-response", text)
	}
	for flag, key := range map[string]string{"--prompt": "prompt", "--source": "source", "--model": "model", "--permission-mode": "permission_mode", "--turn-id": "turn_id"} {
		if _, ok := p.value[key]; ok && (dialect == "codex" || flag == "--prompt" || flag == "--source") {
			args = append(args, flag, p.str(key))
		}
	}
	return args
}

// comparePayloads builds dsh-sandbox's payload for each of the agent's
// and returns the differences, one line each, without values (they
// carry ids and paths that change every run), deduplicated, in order.
func comparePayloads(t *testing.T, agent []hookPayload, dialect, config, home string) []string {
	t.Helper()
	var diffs []string
	add := func(format string, args ...any) {
		line := fmt.Sprintf(format, args...)
		if !slices.Contains(diffs, line) {
			diffs = append(diffs, line)
		}
	}
	for _, p := range agent {
		// Tool events are told apart by the kind of tool: the agent's
		// own shell tool (Bash) or an MCP server's (dsh-sandbox's).
		label := p.event
		switch name := p.str("tool_name"); {
		case strings.HasPrefix(name, "mcp__"):
			label += "(mcp tool)"
		case name != "":
			label += "(" + name + ")"
		}
		notBuilt := p.event + ": not built by dsh-sandbox (not an event its dialect fires)"
		if slices.Contains(diffs, notBuilt) {
			continue
		}
		r := run(t, nil, dryRunArgs(p, dialect, config, home)...)
		if r.code == 2 && strings.Contains(r.stderr, "is not an event "+dialect+" hooks run for") {
			add("%s", notBuilt)
			continue
		}
		if r.code != 0 {
			t.Fatalf("hooks run --dry-run for %s: exit %d: %s", label, r.code, r.stderr)
		}
		var out struct {
			Event string `json:"event"`
			Stdin string `json:"stdin"`
		}
		if err := json.NewDecoder(strings.NewReader(r.stdout)).Decode(&out); err != nil || out.Event != p.event {
			t.Fatalf("hooks run --dry-run --json for %s: %v: %q", label, err, r.stdout)
		}
		ours, err := parsePayload(p.event, []byte(out.Stdin))
		if err != nil {
			t.Fatalf("dsh-sandbox's %s payload %q: %v", label, out.Stdin, err)
		}
		if a, o := bytes.HasSuffix(p.raw, []byte("\n")), bytes.HasSuffix(ours.raw, []byte("\n")); a != o {
			add("%s: framing: agent ends in a newline %v, dsh-sandbox %v", label, a, o)
		}
		var onlyAgent, onlyOurs, commonAgent, commonOurs []string
		for _, k := range p.keys {
			if _, ok := ours.value[k]; ok {
				commonAgent = append(commonAgent, k)
			} else {
				onlyAgent = append(onlyAgent, k)
			}
		}
		for _, k := range ours.keys {
			if _, ok := p.value[k]; ok {
				commonOurs = append(commonOurs, k)
			} else {
				onlyOurs = append(onlyOurs, k)
			}
		}
		if len(onlyAgent) > 0 {
			add("%s: only the agent sends %s", label, strings.Join(onlyAgent, ", "))
		}
		if len(onlyOurs) > 0 {
			add("%s: only dsh-sandbox sends %s", label, strings.Join(onlyOurs, ", "))
		}
		if !slices.Equal(commonAgent, commonOurs) {
			add("%s: order: agent %s; dsh-sandbox %s", label, strings.Join(commonAgent, ", "), strings.Join(commonOurs, ", "))
		}
		for _, k := range commonAgent {
			a, o := p.value[k], ours.value[k]
			switch {
			case jsonType(a) != jsonType(o):
				add("%s: %s: agent sends a %s, dsh-sandbox a %s", label, k, jsonType(a), jsonType(o))
			case k == "transcript_path" && !jsonEqual(a, o):
				add("every event: transcript_path: values differ")
			case !jsonEqual(a, o):
				add("%s: %s: values differ", label, k)
			}
		}
	}
	return diffs
}

// jsonEqual compares two JSON values as values.
func jsonEqual(a, b json.RawMessage) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// checkDifferences compares the differences found with the documented
// ones (docs/dsh-compatibility.md lists them, with the agent version):
// a new difference, or a documented one that is gone, fails the test.
func checkDifferences(t *testing.T, agent string, got, want []string) {
	t.Helper()
	for _, d := range got {
		t.Logf("%s hook payloads: %s", agent, d)
	}
	for _, d := range got {
		if !slices.Contains(want, d) {
			t.Errorf("%s: a difference not listed in docs/dsh-compatibility.md: %s", agent, d)
		}
	}
	for _, d := range want {
		if !slices.Contains(got, d) {
			t.Errorf("%s: a listed difference was not seen (fixed? update docs/dsh-compatibility.md): %s", agent, d)
		}
	}
}

// eventsSeen lists the distinct events of the payloads, in order.
func eventsSeen(ps []hookPayload) []string {
	var out []string
	for _, p := range ps {
		if !slices.Contains(out, p.event) {
			out = append(out, p.event)
		}
	}
	return out
}
