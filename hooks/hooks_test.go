package hooks

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// testDialect is a hand-written Dialect whose grammar is switchable, so
// that this package's tests need neither real dialect.
type testDialect struct{ exact bool }

func (testDialect) Name() string { return "test" }
func (d testDialect) Syntax() Syntax {
	ev := []string{SessionStart, UserPromptSubmit, PreToolUse, PostToolUse, Stop}
	return Syntax{Events: append(ev, "Notification"), Fired: ev, ExactMatchers: d.exact,
		TimeoutSec: !d.exact, SkipAsync: !d.exact}
}
func (testDialect) ToolName(s string) string {
	if s == "bash" {
		return "Bash"
	}
	return s
}
func (testDialect) Payload(ev Event, loc persistence.Locator) ([]byte, error) {
	path, _ := TranscriptPath(ev, loc)
	return EncodeObject(Field{"event", ev.Name}, Field{"tool", ev.ToolName}, Field{"path", path})
}
func (testDialect) Env(ev Event, _ string) []string { return []string{"PROJECT=" + ev.Cwd} }

type fixedLocator struct{ root string }

func (l fixedLocator) Locate(h session.Header) (persistence.Location, bool) {
	return persistence.Location{Kind: persistence.KindJSONL, Path: filepath.Join(l.root, h.ID, "session.jsonl")}, true
}

func mustParse(t *testing.T, cfg string, d Dialect) *File {
	t.Helper()
	c, err := Parse([]byte(cfg), d)
	if err != nil {
		t.Fatalf("Parse(%q) = %v", cfg, err)
	}
	return c
}

func TestParseCase(t *testing.T) {
	tests := []struct {
		name    string
		cfg     string
		exact   bool
		event   string
		hooks   []string
		timeout time.Duration
		warn    int
	}{
		{"wrapped", `{"hooks":{"Stop":[{"hooks":[{"type":"command","command":"a"}]}]},"permissions":{}}`, true, Stop, []string{"a"}, DefaultTimeout, 0},
		{"bare map", `{"Stop":[{"hooks":[{"command":"a"}]}]}`, true, Stop, []string{"a"}, DefaultTimeout, 0},
		{"type defaults to command", `{"Stop":[{"hooks":[{"command":"a","timeout":5}]}]}`, true, Stop, []string{"a"}, 5 * time.Second, 0},
		{"other type skipped", `{"Stop":[{"hooks":[{"type":"prompt","prompt":"x"},{"command":"b"}]}]}`, true, Stop, []string{"b"}, DefaultTimeout, 1},
		{"timeoutSec", `{"Stop":[{"hooks":[{"command":"a","timeoutSec":7}]}]}`, false, Stop, []string{"a"}, 7 * time.Second, 0},
		{"timeoutSec ignored by claude", `{"Stop":[{"hooks":[{"command":"a","timeoutSec":7}]}]}`, true, Stop, []string{"a"}, DefaultTimeout, 0},
		{"async skipped", `{"Stop":[{"hooks":[{"command":"a","async":true},{"command":"b","async":false}]}]}`, false, Stop, []string{"b"}, DefaultTimeout, 1},
		{"accepted but never fired", `{"Notification":[{"hooks":[{"command":"n"}]}]}`, true, "Notification", []string{"n"}, DefaultTimeout, 1},
		{"zero timeout is default", `{"Stop":[{"hooks":[{"command":"a","timeout":0}]}]}`, true, Stop, []string{"a"}, DefaultTimeout, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustParse(t, tt.cfg, testDialect{exact: tt.exact})
			var got []string
			for _, g := range c.Events[tt.event] {
				for _, h := range g.Hooks {
					got = append(got, h.Command)
					if h.Timeout != tt.timeout {
						t.Errorf("Parse(%q) timeout = %v, want %v", tt.cfg, h.Timeout, tt.timeout)
					}
				}
			}
			if !slices.Equal(got, tt.hooks) {
				t.Errorf("Parse(%q) hooks = %q, want %q", tt.cfg, got, tt.hooks)
			}
			if len(c.Warnings) != tt.warn {
				t.Errorf("Parse(%q) warnings = %q, want %d", tt.cfg, c.Warnings, tt.warn)
			}
		})
	}
}

func TestParseToolNames(t *testing.T) {
	c := mustParse(t, `{"hooks":{},"toolNames":{"bash":"Shell"}}`, testDialect{})
	if c.ToolNames["bash"] != "Shell" {
		t.Errorf("Parse toolNames = %v, want bash→Shell", c.ToolNames)
	}
}

// A hook configuration lies in a workspace the agent can write: it never
// chooses a policy, in either form, whatever the value.
func TestParseRefusesPolicyCase(t *testing.T) {
	for _, cfg := range []string{
		`{"hooks":{},"policy":"evil.yaml"}`,
		`{"hooks":{"Stop":[]},"policy":"read-only"}`,
		`{"policy":"evil.yaml","Stop":[]}`,
		`{"hooks":{},"policy":""}`,
	} {
		_, err := Parse([]byte(cfg), testDialect{})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "policy:") || !strings.Contains(err.Error(), "hooks run --policy") {
			t.Errorf("Parse(%q) = %v, want an invalid-argument error naming the key and hooks run --policy", cfg, err)
		}
	}
	// The same configuration without the key is fine.
	mustParse(t, `{"hooks":{"Stop":[]}}`, testDialect{})
}

func TestParseRejectsCase(t *testing.T) {
	tests := []struct {
		name, cfg, place string
	}{
		{"unknown event", `{"hooks":{"PreToolUze":[]}}`, `hooks.PreToolUze: unknown event name "PreToolUze"`},
		{"unknown event bare", `{"Bogus":[]}`, `Bogus: unknown event name`},
		{"invalid regex", `{"PreToolUse":[{"matcher":"Ba(sh","hooks":[{"command":"a"}]}]}`, `PreToolUse[0].matcher: event PreToolUse: invalid pattern "Ba(sh"`},
		{"negative timeout", `{"Stop":[{"hooks":[{"command":"a"},{"command":"b","timeout":-1}]}]}`, `Stop[0].hooks[1].timeout: must not be negative`},
		{"negative timeoutSec", `{"Stop":[{"hooks":[{"command":"b","timeoutSec":-3}]}]}`, `Stop[0].hooks[0].timeoutSec: must not be negative`},
		{"string timeout", `{"Stop":[{"hooks":[{"command":"b","timeout":"5"}]}]}`, `Stop[0].hooks[0]`},
		{"unknown type", `{"Stop":[{"hooks":[{"type":"shell","command":"a"}]}]}`, `Stop[0].hooks[0].type: "shell" is not a hook type`},
		{"non-string type", `{"Stop":[{"hooks":[{"type":1,"command":"a"}]}]}`, `Stop[0].hooks[0]`},
		{"empty command", `{"Stop":[{"hooks":[{"type":"command","command":" "}]}]}`, `Stop[0].hooks[0].command: missing or empty`},
		{"not an object", `[]`, `top level`},
		{"groups not an array", `{"Stop":{}}`, `Stop: want an array`},
		{"trailing data", `{"Stop":[]} {}`, `top level`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// timeoutSec is read only by the regex dialect.
			_, err := Parse([]byte(tt.cfg), testDialect{exact: !strings.Contains(tt.name, "timeoutSec")})
			if err == nil || !strings.Contains(err.Error(), tt.place) || !errors.Is(err, sandbox.ErrInvalid) {
				t.Errorf("Parse(%q) = %v, want an invalid-argument error naming %q", tt.cfg, err, tt.place)
			}
		})
	}
}

func TestLoadNamesFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "settings.json")
	if err := os.WriteFile(path, []byte(`{"hooks":{"Nope":[]}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path, testDialect{})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "hooks.Nope") {
		t.Errorf("Load(%q) = %v, want an error naming the file and hooks.Nope", path, err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.json"), testDialect{}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want ErrNotExist", err)
	}
}

// A configuration in a workspace is data: a planted FIFO, link, directory
// or oversized file is an error at once, never a hang or a host file.
func TestLoadRefusesNonRegularCase(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "settings.json")
	if err := os.WriteFile(good, []byte(`{"hooks":{"Stop":[{"hooks":[{"command":"a"}]}]}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.json")
	if err := os.WriteFile(big, []byte(`{"x":"`+strings.Repeat("a", MaxConfigBytes)+`"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{fifo, "is a FIFO"},
		{link, "is a symbolic link"},
		{dir, "is a directory"},
		{"/dev/zero", "is a character device"},
		{big, "larger than the limit"},
	} {
		_, err := Load(tt.path, testDialect{})
		if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.path) {
			t.Errorf("Load(%q) = %v, want an invalid-argument error naming the file and saying %q", tt.path, err, tt.want)
		}
	}
	if c, err := Load(good, testDialect{}); err != nil || len(c.Events[Stop]) != 1 || c.Path != good {
		t.Errorf("Load(%q) = %+v, %v; want the configuration", good, c, err)
	}
}

func TestMatcherCase(t *testing.T) {
	tests := []struct {
		pattern string
		exact   bool
		value   string
		want    bool
	}{
		{"", true, "Bash", true},
		{"*", false, "anything", true},
		{"Bash", true, "Bash", true},
		{"Bash", true, "BashOutput", false}, // exact, not a prefix
		{"Bash", false, "BashOutput", true}, // regex, unanchored
		{"Edit|Bash", true, "Bash", true},
		{"Edit|Write", true, "Bash", false},
		{"mcp__.*", true, "mcp__fs__read", true},
		{"^Ba", true, "Bash", true},
		{"^Ba$", false, "Bash", false},
		{"bash", true, "Bash", false},
	}
	for _, tt := range tests {
		m, err := compileMatcher(tt.pattern, tt.exact)
		if err != nil {
			t.Fatalf("compileMatcher(%q) = %v", tt.pattern, err)
		}
		got := m == nil || m(tt.value)
		if got != tt.want {
			t.Errorf("match(%q, exact=%v)(%q) = %v, want %v", tt.pattern, tt.exact, tt.value, got, tt.want)
		}
	}
}

func TestNewDispatchMatchesAndKeepsPlaceholders(t *testing.T) {
	cfg := mustParse(t, `{"hooks":{"PreToolUse":[
		{"matcher":"Bash","hooks":[{"command":"one ${PROJECT}"},{"command":"dup"}]},
		{"matcher":"Edit","hooks":[{"command":"never"}]},
		{"hooks":[{"command":"dup"},{"command":"all"}]}],
		"SessionStart":[{"matcher":"resume","hooks":[{"command":"on resume"}]}]}}`, testDialect{exact: true})
	root := t.TempDir()
	h := session.Header{ID: "s1", Cwd: "/w"}
	p, err := NewDispatch(cfg, testDialect{exact: true}, Event{Name: PreToolUse, Session: &h, Cwd: "/w", ToolName: "bash"}, fixedLocator{root}, "")
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, inv := range p.Invocations {
		cmds = append(cmds, inv.Command)
	}
	if want := []string{"one ${PROJECT}", "dup", "all"}; !slices.Equal(cmds, want) {
		t.Errorf("NewDispatch commands = %q, want %q (placeholders are the shell's to expand)", cmds, want)
	}
	if !slices.Equal(p.Env, []string{"PROJECT=/w"}) {
		t.Errorf("NewDispatch env = %q, want the placeholder's value as PROJECT=/w", p.Env)
	}
	wantStdin := `{"event":"PreToolUse","tool":"Bash","path":"` + root + `/s1/session.jsonl"}`
	if string(p.Stdin) != wantStdin {
		t.Errorf("NewDispatch stdin = %s, want %s", p.Stdin, wantStdin)
	}
	// Building the plan created nothing.
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("NewDispatch created %d entries under the sessions root, want none", len(entries))
	}
	p, err = NewDispatch(cfg, testDialect{exact: true}, Event{Name: SessionStart, Source: "startup"}, nil, "")
	if err != nil || len(p.Invocations) != 0 {
		t.Errorf("NewDispatch(SessionStart startup) = %v, %v; want no hooks", p, err)
	}
	if _, err := NewDispatch(cfg, testDialect{exact: true}, Event{Name: "Notification"}, nil, ""); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("NewDispatch(Notification) = %v, want ErrInvalid", err)
	}
	cfg.ToolNames = map[string]string{"bash": "Shell"}
	p, _ = NewDispatch(cfg, testDialect{exact: true}, Event{Name: PreToolUse, ToolName: "bash"}, nil, "")
	if len(p.Invocations) != 2 || p.Event.ToolName != "Shell" {
		t.Errorf("NewDispatch with toolNames bash→Shell = %d hooks, tool %q; want 2 (only the catch-all group), Shell", len(p.Invocations), p.Event.ToolName)
	}
}

func intp(i int) *int { return &i }

func result(code *int, stdout, stderr string) *sandbox.Result {
	return &sandbox.Result{ExitCode: code, Stdout: sandbox.Stream{Text: stdout}, Stderr: sandbox.Stream{Text: stderr}}
}

func TestDecodeCase(t *testing.T) {
	truncated := result(intp(0), `{"decision":"block","reason":"tail"}`, "")
	truncated.Stdout.Truncated, truncated.Stdout.DroppedBytes = true, 50_000_000
	timedOut := &sandbox.Result{TimedOut: true, TimeoutMs: 1000, Signal: "SIGKILL"}
	tests := []struct {
		name  string
		event string
		res   *sandbox.Result
		err   error
		want  HookResult
	}{
		{"exit 2 blocks with stderr", PreToolUse, result(intp(2), "ignored", " no rm \n"), nil,
			HookResult{ExitCode: intp(2), Decision: Block, Reason: "no rm"}},
		{"exit 0 plain", PreToolUse, result(intp(0), "hello\n", ""), nil,
			HookResult{ExitCode: intp(0), Output: "hello\n"}},
		{"exit 0 plain prompt context", UserPromptSubmit, result(intp(0), "ctx\n", ""), nil,
			HookResult{ExitCode: intp(0), Output: "ctx\n", AdditionalContext: "ctx"}},
		{"continue false", Stop, result(intp(0), `{"continue":false,"stopReason":"done"}`, ""), nil,
			HookResult{ExitCode: intp(0), Stop: true, StopReason: "done"}},
		{"continue true", Stop, result(intp(0), `{"continue":true,"stopReason":"ignored"}`, ""), nil,
			HookResult{ExitCode: intp(0)}},
		{"systemMessage", Stop, result(intp(0), `{"systemMessage":"hi"}`, ""), nil,
			HookResult{ExitCode: intp(0), SystemMessage: "hi"}},
		{"decision approve", PreToolUse, result(intp(0), `{"decision":"approve","reason":"ok"}`, ""), nil,
			HookResult{ExitCode: intp(0), Decision: Allow, Reason: "ok"}},
		{"decision block", Stop, result(intp(0), `{"decision":"block","reason":"keep going"}`, ""), nil,
			HookResult{ExitCode: intp(0), Decision: Block, Reason: "keep going"}},
		{"permission deny", PreToolUse, result(intp(0), `{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no"}}`, ""), nil,
			HookResult{ExitCode: intp(0), Decision: Deny, Reason: "no"}},
		{"permission ask", PreToolUse, result(intp(0), `{"hookSpecificOutput":{"permissionDecision":"ask","permissionDecisionReason":"sure?"}}`, ""), nil,
			HookResult{ExitCode: intp(0), Decision: Ask, Reason: "sure?"}},
		{"permission allow", PreToolUse, result(intp(0), `{"hookSpecificOutput":{"permissionDecision":"allow"}}`, ""), nil,
			HookResult{ExitCode: intp(0), Decision: Allow}},
		{"additionalContext", PostToolUse, result(intp(0), ` {"hookSpecificOutput":{"additionalContext":"more"}}`+"\n", ""), nil,
			HookResult{ExitCode: intp(0), AdditionalContext: "more"}},
		{"malformed json is plain", PreToolUse, result(intp(0), `{"decision":"block"`, ""), nil,
			HookResult{ExitCode: intp(0), Output: `{"decision":"block"`}},
		{"two objects are plain", PreToolUse, result(intp(0), `{"decision":"block"}{}`, ""), nil,
			HookResult{ExitCode: intp(0), Output: `{"decision":"block"}{}`}},
		{"truncated is plain", PreToolUse, truncated, nil,
			HookResult{ExitCode: intp(0), Output: `{"decision":"block","reason":"tail"}`, OutputTruncated: true}},
		{"exit 1 non-blocking", PreToolUse, result(intp(1), `{"decision":"block"}`, "oops"), nil,
			HookResult{ExitCode: intp(1), Error: "exit code 1: oops"}},
		{"timeout killed", PreToolUse, timedOut, nil,
			HookResult{Error: "timed out after 1000ms; killed"}},
		{"signal", PreToolUse, &sandbox.Result{Signal: "SIGSEGV"}, nil,
			HookResult{Error: "killed by signal SIGSEGV"}},
		{"sandbox error", PreToolUse, nil, sandbox.Errorf(sandbox.ErrUnavailable, "runc missing"),
			HookResult{Error: "sandbox: runc missing", Decision: Block, Reason: "the hook could not run in the sandbox (runc missing); failing closed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decode(tt.event, tt.res, tt.err)
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(tt.want)
			if string(g) != string(w) {
				t.Errorf("Decode(%s) = %s, want %s", tt.name, g, w)
			}
		})
	}
}

func TestMergeCase(t *testing.T) {
	tests := []struct {
		name     string
		in       []HookResult
		decision string
		reason   string
		blocks   bool
	}{
		{"none", nil, "", "", false},
		{"allow", []HookResult{{Decision: Allow, Reason: "a"}}, Allow, "a", false},
		{"ask over allow", []HookResult{{Decision: Allow, Reason: "a"}, {Decision: Ask, Reason: "q"}}, Ask, "q", false},
		{"deny over ask over allow", []HookResult{{Decision: Ask, Reason: "q"}, {Decision: Deny, Reason: "d1"}, {Decision: Allow}, {Decision: Deny, Reason: "d2"}}, Deny, "d1\nd2", true},
		{"block joins with deny", []HookResult{{Decision: Block, Reason: "b"}, {Decision: Deny, Reason: "d"}}, Block, "b\nd", true},
		{"errors do not block", []HookResult{{Error: "exit code 1"}}, "", "", false},
		{"stop blocks", []HookResult{{Stop: true, StopReason: "s"}}, "", "", true},
	}
	for _, tt := range tests {
		o := Merge(tt.in)
		if o.Decision != tt.decision || o.Reason != tt.reason || o.Blocks() != tt.blocks {
			t.Errorf("Merge(%s) = %q %q blocks=%v, want %q %q blocks=%v", tt.name, o.Decision, o.Reason, o.Blocks(), tt.decision, tt.reason, tt.blocks)
		}
	}
	o := Merge([]HookResult{{AdditionalContext: "c1", SystemMessage: "m1"}, {AdditionalContext: "c2"}})
	if o.AdditionalContext != "c1\nc2" || o.SystemMessage != "m1" {
		t.Errorf("Merge contexts = %q, %q; want c1\\nc2, m1", o.AdditionalContext, o.SystemMessage)
	}
}

// recordingRunner is a fake Runner that records requests and answers from
// a table keyed by command.
type recordingRunner struct {
	mu      sync.Mutex
	reqs    []sandbox.Request
	answers map[string]*sandbox.Result
	running int
	peak    int
	release chan struct{}
}

func (r *recordingRunner) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, *req)
	r.running++
	r.peak = max(r.peak, r.running)
	r.mu.Unlock()
	if r.release != nil {
		<-r.release
	}
	r.mu.Lock()
	r.running--
	r.mu.Unlock()
	return r.answers[req.Command], nil
}

func TestPlanRunConcurrentMerged(t *testing.T) {
	cfg := mustParse(t, `{"hooks":{"PreToolUse":[{"matcher":"Bash","hooks":[
		{"command":"a","timeout":3},{"command":"b"},{"command":"c"}]}]}}`, testDialect{exact: true})
	root := t.TempDir()
	h := session.Header{ID: "s1", Cwd: "/w"}
	p, err := NewDispatch(cfg, testDialect{exact: true}, Event{Name: PreToolUse, Session: &h, Cwd: "/w", ToolName: "bash"}, fixedLocator{root}, "")
	if err != nil {
		t.Fatal(err)
	}
	r := &recordingRunner{release: make(chan struct{}), answers: map[string]*sandbox.Result{
		"a": result(intp(0), `{"hookSpecificOutput":{"permissionDecision":"allow"}}`, ""),
		"b": result(intp(2), "", "denied by b"),
		"c": result(intp(0), `{"hookSpecificOutput":{"permissionDecision":"ask","permissionDecisionReason":"c asks"}}`, ""),
	}}
	done := make(chan *Outcome)
	go func() {
		sess := sandbox.Session{ID: "s1", Cwd: "/w", TranscriptDir: filepath.Join(root, "s1")}
		o, err := p.Run(context.Background(), RunOptions{Runner: r, Policy: sandbox.Policy{Name: "x"}, Session: sess})
		if err != nil {
			t.Error(err)
		}
		done <- o
	}()
	// All three must be running at once before any is released (the
	// deadline only guards against a hang; it asserts no speed).
	deadline := time.Now().Add(time.Minute)
	for {
		if time.Now().After(deadline) {
			close(r.release)
			t.Fatal("the three hooks never ran at the same time")
		}
		r.mu.Lock()
		n := r.running
		r.mu.Unlock()
		if n == 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(r.release)
	o := <-done
	if o.Decision != Block || o.Reason != "denied by b" || !o.Blocks() || len(o.Hooks) != 3 {
		t.Errorf("Run outcome = %+v, want block by b with 3 hooks", o)
	}
	if o.Hooks[0].Place != "hooks.PreToolUse[0].hooks[0]" || o.Hooks[2].Command != "c" {
		t.Errorf("Run hooks out of file order: %+v", o.Hooks)
	}
	for _, req := range r.reqs {
		if string(req.Stdin) != string(p.Stdin) || len(req.DSHEnv) != 0 || !slices.Equal(req.Env, []string{"PROJECT=/w"}) {
			t.Errorf("request %q: stdin %q env %q dshEnv %q; want the payload, the dialect env and no DSH_*", req.Command, req.Stdin, req.Env, req.DSHEnv)
		}
		if req.Session.Cwd != "/w" || req.Session.ID != "s1" {
			t.Errorf("request %q: session %+v, want cwd /w id s1", req.Command, req.Session)
		}
		// The transcript directory does not exist: it is not mounted, so
		// running hooks creates no session.
		if req.Session.TranscriptDir != "" {
			t.Errorf("request %q: transcriptDir %q for a session that does not exist, want empty", req.Command, req.Session.TranscriptDir)
		}
		wantTimeout := int64(600_000)
		if req.Command == "a" {
			wantTimeout = 3000
		}
		if req.TimeoutMs != wantTimeout {
			t.Errorf("request %q: timeoutMs %d, want %d", req.Command, req.TimeoutMs, wantTimeout)
		}
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Errorf("Run created %d entries under the sessions root, want none", len(entries))
	}
}

func TestWithMountsCase(t *testing.T) {
	base := sandbox.Policy{Workspace: "rw", Transcript: "ro", Mounts: []sandbox.Mount{{Source: "/data", Target: "/data", ReadOnly: true}}}
	sess := sandbox.Session{Cwd: "/srv/proj", TranscriptDir: "/r/p/s1"}
	tests := []struct {
		name, path, plugin string
		want               []string // extra mount targets
		err                string
	}{
		{"separate dir", "/etc/hooks/h.json", "", []string{"/etc/hooks"}, ""},
		{"plugin too", "/etc/hooks/h.json", "/opt/plugin", []string{"/etc/hooks", "/opt/plugin"}, ""},
		{"inside workspace", "/srv/proj/.claude/settings.json", "", nil, ""},
		{"already mounted", "/data/h.json", "", nil, ""},
		{"contains workspace", "/srv/h.json", "", nil, `hook directory "/srv" contains the workspace`},
		{"contains transcript", "/r/h.json", "", nil, `contains the transcript directory`},
		{"relative plugin", "/etc/hooks/h.json", "plugin", nil, "CLAUDE_PLUGIN_ROOT"},
	}
	for _, tt := range tests {
		c := &File{Path: tt.path}
		p, err := c.WithMounts(base, sess, tt.plugin)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("WithMounts(%s) = %v, want error %q", tt.name, err, tt.err)
			}
			continue
		}
		var got []string
		for _, m := range p.Mounts[1:] {
			if !m.ReadOnly || m.Source != m.Target {
				t.Errorf("WithMounts(%s) mount %+v, want read-only at its own path", tt.name, m)
			}
			got = append(got, m.Target)
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("WithMounts(%s) = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	if len(base.Mounts) != 1 {
		t.Errorf("WithMounts modified its argument: %+v", base.Mounts)
	}
}

func TestEncodeObjectKeepsOrderAndHTML(t *testing.T) {
	b, err := EncodeObject(Field{"z", "<a&b>"}, Field{"a", nil}, Field{"m", json.RawMessage(`{ "x" : 1 }`)})
	if want := `{"z":"<a&b>","a":null,"m":{"x":1}}`; err != nil || string(b) != want {
		t.Errorf("EncodeObject = %s, %v; want %s", b, err, want)
	}
}
