package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/hooks"
	"github.com/dsh-sandbox/dsh-sandbox/hooks/claudecode"
	"github.com/dsh-sandbox/dsh-sandbox/hooks/codex"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func hooksCommand() *cli.Command {
	return &cli.Command{
		Name:  "hooks",
		Usage: "run Claude Code and Codex hook scripts in the sandbox",
		Subcommands: []*cli.Command{{
			Name:  "run",
			Usage: "build a dialect payload, run the configured hooks, print the merged outcome",
			Description: `Loads the hook configuration (--config; the global --config stays the file of flag
defaults) in the dialect's grammar, builds the event's payload from the session flags and
the transcript location Locate gives (creating nothing), and runs every matching hook
concurrently, each in its own container under the operator's policy (--policy; default
workspace-write), with the dialect's environment (CLAUDE_PROJECT_DIR, and
CLAUDE_PLUGIN_ROOT when set, for Claude Code), no DSH_* variables, the session cwd as
working directory, and the configuration's directory (and $CLAUDE_PLUGIN_ROOT) mounted
read-only. Without --session-id the event has no agent (as dsh's tool events may), and the
payload's cwd is --cwd (default: the current directory), where the harness runs.

The configuration is data, not configuration of dsh-sandbox: it usually lies in a workspace
the agent can write. It is opened without following links and must be a regular file of
bounded size; it may not name a policy (a "policy" key is an error). Hook commands run as
written through bash -c: placeholders such as ${CLAUDE_PROJECT_DIR} are expanded by that
shell from the environment, never pasted into the command. A --policy FILE must be owned by
root or the invoking user, writable by nobody else, and lie outside the workspace and the
--workspace-roots.

Prints the merged outcome: decision, reason, additionalContext, systemMessage and each
hook's exit code and duration. Exits 0, or 2 when the outcome blocks, denies or stops.
--dry-run prints the exact stdin bytes the hooks would get and runs nothing.

Examples:
   dsh-sandbox hooks run --dialect claude-code --config .claude/settings.json \
       --event PreToolUse --session-id s1 --tool-input '{"command":"rm -rf /"}'
   dsh-sandbox hooks run --dialect codex --config hooks.json --event Stop --dry-run
   dsh-sandbox hooks run --dialect claude-code --config .claude/settings.json \
       --policy /etc/dsh-sandbox/hooks.yaml --event Stop --session-id s1`,
			Flags: append([]cli.Flag{
				&cli.StringFlag{Name: "dialect", Required: true, Usage: "hook dialect: claude-code or codex"},
				&cli.StringFlag{Name: "config", Required: true, Usage: "hook configuration `FILE` ({\"hooks\": {…}} or a bare event map); read as data, it never names a policy"},
				&cli.StringFlag{Name: "policy", Value: hooks.DefaultPolicy, Usage: "the operator's policy `NAME|FILE` hooks run under (read-only, workspace-write, ci, or an operator-owned .yaml/.json outside the workspace)"},
				&cli.StringFlag{Name: "event", Required: true, Usage: "event `NAME`: SessionStart, UserPromptSubmit, PreToolUse, PostToolUse, Stop (Claude Code also SubagentStart, SubagentStop)"},
				&cli.StringFlag{Name: "tool-name", Value: "bash", Usage: "the harness's tool `NAME` on tool events (bash is presented as Bash)"},
				&cli.StringFlag{Name: "tool-input", Usage: "tool arguments as a JSON object, e.g. '{\"command\":\"ls\"}'"},
				&cli.StringFlag{Name: "tool-response", Usage: "the tool's result `TEXT` (PostToolUse)"},
				&cli.StringFlag{Name: "tool-use-id", Usage: "the tool call's `ID`"},
				&cli.StringFlag{Name: "prompt", Usage: "the user's prompt `TEXT` (UserPromptSubmit)"},
				&cli.StringFlag{Name: "source", Value: "startup", Usage: "why the session started (SessionStart): startup, resume, clear, compact"},
				&cli.BoolFlag{Name: "stop-hook-active", Usage: "the agent already continues because of a stop hook (Stop)"},
				&cli.StringFlag{Name: "model", Usage: "the model `NAME` (Codex)"},
				&cli.StringFlag{Name: "permission-mode", Value: "default", Usage: "the permission `MODE` (Codex)"},
				&cli.StringFlag{Name: "turn-id", Usage: "the turn `ID` (Codex)"},
				&cli.BoolFlag{Name: "dry-run", Usage: "print the exact stdin bytes each hook would get; run nothing"},
				jsonFlag,
			}, daemonFlags()...),
			Action: runHooks,
		}},
	}
}

// dialects are the hook dialects by command-line name.
var dialects = map[string]hooks.Dialect{
	claudecode.Name: claudecode.Dialect{},
	codex.Name:      codex.Dialect{},
}

func runHooks(c *cli.Context) error {
	s, err := loadSettings(c)
	if err != nil {
		return err
	}
	d, ok := dialects[c.String("dialect")]
	if !ok {
		return usageError("--dialect: %q is not one of claude-code, codex", c.String("dialect"))
	}
	base, err := s.operatorPolicy("policy", c.String("policy"), true)
	if err != nil {
		return err
	}
	cfg, err := hooks.Load(c.String("config"), d)
	if err != nil {
		return usageError("--config: %v", err)
	}
	for _, w := range cfg.Warnings {
		s.log.Warn().Str("dialect", d.Name()).Msg(w)
	}
	ev, err := hookEvent(c, s)
	if err != nil {
		return err
	}
	pluginRoot := ""
	if d.Name() == claudecode.Name {
		if pluginRoot = os.Getenv("CLAUDE_PLUGIN_ROOT"); pluginRoot != "" && !filepath.IsAbs(pluginRoot) {
			return usageError("CLAUDE_PLUGIN_ROOT: must be an absolute path")
		}
	}
	disp, err := hooks.NewDispatch(cfg, d, ev, s.locator(), pluginRoot)
	if err != nil {
		return err
	}
	if c.Bool("dry-run") {
		return printDispatch(c, disp)
	}
	// The hooks' calls: the session the global flags name, owned by the
	// harness user, with no DSH_* snapshot (buildRequest), under the
	// operator's policy plus the configuration's mounts.
	call, err := s.buildRequest(c.Context, base, policy.Narrowing{}, false)
	if err != nil {
		return err
	}
	pol, err := hooksPolicy(cfg, call.Policy, call.Session, pluginRoot)
	if err != nil {
		return err
	}
	if err := s.checkCallPaths(pol); err != nil {
		return err
	}
	if len(disp.Invocations) == 0 {
		s.log.Info().Str("event", ev.Name).Msg("no hook matches")
		return printOutcome(c, hooks.Merge(nil))
	}
	ex, closeEx, err := s.newExecutor(pol)
	if err != nil {
		return err
	}
	defer closeEx()
	out, err := disp.Run(c.Context, hooks.RunOptions{Runner: ex, Policy: pol, Session: call.Session, Detector: detector})
	if err != nil {
		return err
	}
	if err := printOutcome(c, out); err != nil {
		return err
	}
	if out.Blocks() {
		return &childExit{2}
	}
	return nil
}

// hookEvent is the event the flags describe, in the session the global
// flags name.
func hookEvent(c *cli.Context, s *settings) (hooks.Event, error) {
	// dsh names the harness process's directory as the payload's cwd when
	// the session has none (--no-cwd) or there is no agent. Without an
	// agent, --cwd (default: the current directory) is that directory.
	processCwd := s.cwd
	if s.header != nil || processCwd == "" {
		wd, err := syscall.Getwd()
		if err != nil {
			return hooks.Event{}, fmt.Errorf("current directory: %w", err)
		}
		processCwd = wd
	}
	ev := hooks.Event{
		Name:           c.String("event"),
		Session:        s.header,
		Cwd:            s.cwd,
		ProcessCwd:     processCwd,
		ToolUseID:      c.String("tool-use-id"),
		ToolResponse:   c.String("tool-response"),
		Prompt:         c.String("prompt"),
		Source:         c.String("source"),
		StopHookActive: c.Bool("stop-hook-active"),
		Model:          c.String("model"),
		PermissionMode: c.String("permission-mode"),
		TurnID:         c.String("turn-id"),
	}
	if s.header != nil && (ev.Name == hooks.SubagentStart || ev.Name == hooks.SubagentStop) {
		ev.AgentID = s.header.ID // the subagent's session, as dsh's agents registry names it
	}
	if ev.Name == hooks.PreToolUse || ev.Name == hooks.PostToolUse {
		ev.ToolName = c.String("tool-name")
		if in := c.String("tool-input"); in != "" {
			if !json.Valid([]byte(in)) {
				return hooks.Event{}, usageError("--tool-input: not valid JSON")
			}
			ev.ToolInput = json.RawMessage(in)
		}
	}
	return ev, nil
}

// hooksPolicy adds to the operator's policy p (--policy) the read-only
// mounts of the configuration's directory and the plugin root.
func hooksPolicy(cfg *hooks.File, p sandbox.Policy, sess sandbox.Session, pluginRoot string) (sandbox.Policy, error) {
	p, err := cfg.WithMounts(p, sess, pluginRoot)
	if err != nil {
		return sandbox.Policy{}, fmt.Errorf("hook configuration %s: %w", cfg.Path, err)
	}
	return policy.Normalize(p)
}

// printDispatch prints the payload bytes exactly on stdout (the same for
// every hook) and the hooks that would get them on stderr; with --json,
// one object with the payload, the env names and the hooks.
func printDispatch(c *cli.Context, p *hooks.Dispatch) error {
	if c.Bool("json") {
		type hook struct {
			Place     string `json:"place"`
			Matcher   string `json:"matcher"`
			Command   string `json:"command"`
			TimeoutMs int64  `json:"timeoutMs"`
		}
		out := struct {
			Event    string   `json:"event"`
			Stdin    string   `json:"stdin"`
			EnvNames []string `json:"envNames"`
			Hooks    []hook   `json:"hooks"`
		}{Event: p.Event.Name, Stdin: string(p.Stdin), EnvNames: []string{}, Hooks: []hook{}}
		for _, kv := range p.Env {
			name, _, _ := strings.Cut(kv, "=")
			out.EnvNames = append(out.EnvNames, name)
		}
		for _, inv := range p.Invocations {
			out.Hooks = append(out.Hooks, hook{inv.Place, inv.Matcher, inv.Command, inv.Timeout.Milliseconds()})
		}
		return writeJSON(c.App.Writer, out)
	}
	if len(p.Invocations) == 0 {
		fmt.Fprintf(c.App.ErrWriter, "dsh-sandbox: no hook matches %s; this is the payload hooks would get:\n", p.Event.Name)
	}
	for _, inv := range p.Invocations {
		fmt.Fprintf(c.App.ErrWriter, "dsh-sandbox: %s would run %q with these stdin bytes:\n", inv.Place, inv.Command)
	}
	_, err := c.App.Writer.Write(p.Stdin)
	return err
}

func printOutcome(c *cli.Context, o *hooks.Outcome) error {
	if c.Bool("json") {
		return writeJSON(c.App.Writer, o)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "decision: %s\n", o.Decision)
	fmt.Fprintf(&b, "reason: %s\n", oneLine(o.Reason))
	if o.Stop {
		fmt.Fprintf(&b, "stop: %s\n", oneLine(o.StopReason))
	}
	fmt.Fprintf(&b, "additionalContext: %s\n", oneLine(o.AdditionalContext))
	fmt.Fprintf(&b, "systemMessage: %s\n", oneLine(o.SystemMessage))
	for _, h := range o.Hooks {
		code := "none"
		if h.ExitCode != nil {
			code = fmt.Sprint(*h.ExitCode)
		}
		fmt.Fprintf(&b, "hook %s: exit %s in %s", h.Place, code, h.Duration.Round(time.Millisecond))
		if h.Decision != "" {
			fmt.Fprintf(&b, ", %s", h.Decision)
		}
		if h.Error != "" {
			fmt.Fprintf(&b, ", error: %s", oneLine(h.Error))
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(c.App.Writer, b.String())
	return err
}

// oneLine quotes multi-line text so that each field stays on one line.
func oneLine(s string) string {
	if strings.ContainsAny(s, "\n\r") {
		return fmt.Sprintf("%q", s)
	}
	return s
}
