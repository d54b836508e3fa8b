//go:build dshinterop

package dshinterop

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/hooks"
	"github.com/dsh-sandbox/dsh-sandbox/hooks/claudecode"
	"github.com/dsh-sandbox/dsh-sandbox/hooks/codex"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// jsonNumbers are number spellings JSON.parse and JSON.stringify change.
var jsonNumbers = []string{
	"0", "-0", "1", "1.0", "1.50", "-2.5e3", "1e21", "1e20", "123456789012345678901234567890", "1E-7",
	"0.000001", "0.0000001", "5e-324", "1.7976931348623157e308", "1e400", "-1e400", "0.1", "3.14159",
	"9007199254740993", "4.35", "1e-400", "100", "2e2",
}

// randJSON returns a random JSON value as text, with the spellings a
// JavaScript round trip normalizes: odd whitespace, number forms, escapes
// (\u00e9, \/, a surrogate pair, a lone surrogate), integer-like keys,
// repeated keys and nesting.
func randJSON(r *rand.Rand, depth int) string {
	ws := func() string { return []string{"", "", "", " ", "\n\t", "\r\n "}[r.IntN(6)] }
	switch k := r.IntN(9); {
	case depth > 2 || k < 2:
		return jsonNumbers[r.IntN(len(jsonNumbers))]
	case k < 4:
		return randJSONString(r)
	case k == 4:
		return []string{"true", "false", "null"}[r.IntN(3)]
	case k == 5:
		var elems []string
		for range r.IntN(4) {
			elems = append(elems, ws()+randJSON(r, depth+1)+ws())
		}
		return "[" + strings.Join(elems, ",") + "]"
	default:
		return randObject(r, depth+1, false)
	}
}

func randJSONString(r *rand.Rand) string {
	switch r.IntN(6) {
	case 0:
		return `"caf\u00e9 \/ \ud83d\ude00 \u2028 \u001F \b"`
	case 1:
		return `"lone \ud800 and \udc00x"`
	default:
		return jsString(strings.ReplaceAll(randString(r), "\x00", "\\u0000"))
	}
}

// randObject returns a random JSON object; with command it may carry a
// "command" member of any type.
func randObject(r *rand.Rand, depth int, command bool) string {
	ws := func() string { return []string{"", "", " ", "\n  "}[r.IntN(4)] }
	keys := []string{"a", "b", "z", "description", "timeout", "10", "2", "0", "01", "-1", "4294967294", "4294967295", "1.5", "__proto__", "comm\\u0061nd", "é"}
	var members []string
	if command {
		switch r.IntN(8) {
		case 0: // no command
		case 1:
			members = append(members, `"command":`+randJSON(r, depth+1))
		case 2:
			members = append(members, `"command":null`, `"command":`+randJSONString(r))
		default:
			members = append(members, `"command":`+randJSONString(r))
		}
	}
	for range r.IntN(5) {
		members = append(members, ws()+`"`+keys[r.IntN(len(keys))]+`"`+ws()+":"+ws()+randJSON(r, depth+1))
	}
	r.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
	return "{" + ws() + strings.Join(members, ",") + ws() + "}"
}

// TestHookPayloadsMatchDsh: for every event of both dialects, with and
// without an agent, a cwd or a transcript (JSONL plain or zstd, SQLite),
// with random prompts, tool inputs and responses, the stdin bytes and the
// environment a hook gets are those dsh's bridges give it.
func TestHookPayloadsMatchDsh(t *testing.T) {
	d := startDriver(t)
	r := newRand(t, "hooks")
	n := caseCount(t)
	procCwd, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const root = "/var/dsh/sessions"
	dialects := []hooks.Dialect{claudecode.Dialect{}, codex.Dialect{}}
	cases := make([]map[string]any, n)
	type ours struct {
		stdin   string
		env     []string
		workdir string
		err     error
	}
	want := make([]ours, n)
	for i := range cases {
		dl := dialects[r.IntN(2)]
		events := dl.Syntax().Fired
		name := events[r.IntN(len(events))]
		turn := r.IntN(50)
		c := map[string]any{"op": "hook", "dialect": dl.Name(), "event": name, "root": root, "cwd": procCwd, "turn": turn}
		comp := []jsonl.Compression{jsonl.CompressionZstd, jsonl.CompressionNone}[r.IntN(2)]
		c["compression"] = string(comp)
		var loc persistence.Locator
		if r.IntN(5) == 0 {
			c["sqlite"] = true
			loc = noLocation{}
		} else {
			st, err := jsonl.New(jsonl.Options{Root: root, Compression: comp})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			loc = st
		}
		ev := hooks.Event{Name: name, ProcessCwd: procCwd, TurnID: strconv.Itoa(turn)}
		// dsh fires tool events and (an unknown child's) subagent events
		// without an agent; the others always have one.
		var h *session.Header
		tool := name == hooks.PreToolUse || name == hooks.PostToolUse
		subagent := name == hooks.SubagentStart || name == hooks.SubagentStop
		if !(tool || subagent) || r.IntN(4) > 0 {
			hh := randLogHeader(r)
			h = &hh
		}
		if subagent {
			ev.AgentID = "agent-" + randShort(r)
			c["agentId"] = ev.AgentID
			if h != nil {
				c["childHeader"] = headerObject(*h)
			}
		} else if h != nil {
			c["header"] = headerObject(*h)
		}
		if h != nil {
			ev.Session = h
			ev.Cwd = h.Cwd
		} else if tool {
			ev.TurnID = "0" // dsh's turn without an agent
		}
		switch name {
		case hooks.PreToolUse, hooks.PostToolUse:
			ev.ToolName = []string{"bash", "Bash", "read_file", randShort(r)}[r.IntN(4)]
			ev.ToolUseID = "toolu_" + randShort(r)
			ev.ToolInput = json.RawMessage(randObject(r, 0, true))
			ev.ToolResponse = randString(r)
			c["toolName"], c["toolUseId"], c["toolInput"], c["toolResponse"] = ev.ToolName, ev.ToolUseID, string(ev.ToolInput), ev.ToolResponse
		case hooks.UserPromptSubmit:
			ev.Prompt = randString(r)
			c["prompt"] = ev.Prompt
		case hooks.SessionStart:
			ev.Source = []string{"startup", "resume", "clear", "compact", randShort(r)}[r.IntN(5)]
			c["source"] = ev.Source
		}
		if dl.Name() == codex.Name && r.IntN(2) == 0 {
			ev.Model = []string{"deepseek-chat", "deepseek-reasoner", randShort(r)}[r.IntN(3)]
			c["model"] = ev.Model
		}
		cases[i] = c
		stdin, err := dl.Payload(ev, loc)
		want[i] = ours{stdin: string(stdin), env: dl.Env(ev, ""), workdir: ev.Cwd, err: err}
		slices.Sort(want[i].env)
	}
	diffs := newDifferences("hooks", n)
	perEvent := map[string]int{}
	for i, res := range d.run(t, cases) {
		var dsh struct {
			Stdin   string            `json:"stdin"`
			Env     map[string]string `json:"env"`
			Workdir string            `json:"workdir"`
		}
		_ = json.Unmarshal(res.raw, &dsh)
		var env []string
		for k, v := range dsh.Env {
			env = append(env, k+"="+v)
		}
		slices.Sort(env)
		w := want[i]
		if !res.OK || w.err != nil || dsh.Stdin != w.stdin || !slices.Equal(env, w.env) || dsh.Workdir != w.workdir {
			diffs.add(fmt.Sprintf("case %s\n  dsh:  %s\n  ours: stdin %q env %q workdir %q err %v", mustJSON(cases[i]), strings.TrimSpace(string(res.raw)), w.stdin, w.env, w.workdir, w.err))
		}
		perEvent[cases[i]["dialect"].(string)+" "+cases[i]["event"].(string)]++
	}
	t.Logf("hooks: cases per dialect and event: %v", perEvent)
	diffs.report(t)
}
