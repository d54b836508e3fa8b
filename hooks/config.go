package hooks

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/internal/safefile"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

const (
	// DefaultTimeout is a hook's timeout when the configuration gives
	// none.
	DefaultTimeout = 600 * time.Second
	// DefaultPolicy is the policy hooks run under when the operator names
	// none (`hooks run --policy`). A hook configuration never names one.
	DefaultPolicy = "workspace-write"
	// MaxConfigBytes bounds a configuration file.
	MaxConfigBytes = 4 << 20
)

// File is a loaded hook configuration. Load or Parse makes it; it is
// read-only afterwards and safe for concurrent use.
type File struct {
	// Path is the absolute path of the file it was loaded from; "" for
	// Parse.
	Path string
	// Dialect is the name of the dialect it was read as.
	Dialect string
	// ToolNames override the dialect's presented tool names, keyed by
	// the harness's tool name ("bash": "Shell").
	ToolNames map[string]string
	// Events holds the matcher groups of each event, in file order.
	Events map[string][]Group
	// Warnings say what was accepted but will not run (hooks of another
	// type, async Codex hooks, events this harness never fires).
	Warnings []string
}

// Group is one matcher and the hooks it selects.
type Group struct {
	// Matcher is the pattern as written; "" and "*" match everything.
	Matcher string
	// Hooks are the command hooks of the group, in file order.
	Hooks []Hook

	match matcher
}

// Hook is one command hook.
type Hook struct {
	// Command is run as `bash -c Command` exactly as written: a
	// placeholder such as ${CLAUDE_PROJECT_DIR} is expanded by that shell
	// from the hook's environment, never substituted by dsh-sandbox.
	Command string
	// Timeout bounds the hook; DefaultTimeout when the file gives none.
	Timeout time.Duration
	// Place is where the hook is in the file, such as
	// "hooks.PreToolUse[0].hooks[1]".
	Place string
}

// Load reads the configuration file at path in dialect d. The file lies
// in a workspace the agent can write, so it is opened as data
// (internal/safefile): no symbolic link in any component of its path,
// without blocking, a regular file of at most MaxConfigBytes bytes. A
// FIFO, a link, a directory or a device is an error at once. Errors wrap
// sandbox.ErrInvalid and name the file and the place in it.
func Load(path string, d Dialect) (*File, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "hook configuration %q: %v", path, err)
	}
	data, err := safefile.Read(abs, safefile.Options{MaxBytes: MaxConfigBytes})
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "hook configuration %w", err)
	}
	c, err := Parse(data, d)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "hook configuration %s: %w", abs, err)
	}
	c.Path = abs
	return c, nil
}

// Parse reads a configuration in dialect d: either {"hooks": {Event:
// [...]}, "toolNames": {...}} (other top-level keys, as in a settings
// file, are ignored) or a bare event map {Event: [...]}.
//
// A configuration never chooses the policy its hooks run under: it lies
// in a workspace the agent can write (DESIGN §3.10). A top-level "policy"
// key is therefore an error naming the key, in either form; the operator
// names the policy (`hooks run --policy`).
//
// Each event holds groups {"matcher": P, "hooks": [{"type": "command",
// "command": C, "timeout": S}]}; type defaults to "command" and other
// model-driven types ("prompt", "agent") are skipped with a warning;
// timeouts are seconds (default 600). An unknown event name, a matcher
// that does not compile, any other type, an empty command, or a negative
// or non-numeric timeout rejects the whole file
// with an error wrapping sandbox.ErrInvalid that names the place.
func Parse(data []byte, d Dialect) (*File, error) {
	syn := d.Syntax()
	var top map[string]json.RawMessage
	if err := strictObject(data, &top); err != nil {
		return nil, invalid("top level: %v", err)
	}
	if _, ok := top["policy"]; ok {
		return nil, invalid(`policy: a hook configuration may not choose the policy its hooks run under (it lies in a workspace the agent can write); remove the key and have the operator pass "hooks run --policy NAME|FILE"`)
	}
	c := &File{Dialect: d.Name(), Events: map[string][]Group{}}
	events := top
	prefix := ""
	if raw, ok := top["hooks"]; ok {
		prefix = "hooks."
		events = nil // decode into a fresh map, not into top
		if err := strictObject(raw, &events); err != nil {
			return nil, invalid("hooks: %v", err)
		}
		if raw, ok := top["toolNames"]; ok {
			if err := json.Unmarshal(raw, &c.ToolNames); err != nil {
				return nil, invalid("toolNames: want an object of strings: %v", err)
			}
			for k, v := range c.ToolNames {
				if k == "" || v == "" {
					return nil, invalid("toolNames: %q: names must not be empty", k)
				}
			}
		}
	}
	names := make([]string, 0, len(events))
	for name := range events {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		place := prefix + name
		if !slices.Contains(syn.Events, name) {
			return nil, invalid("%s: unknown event name %q for %s (known: %s)", place, name, d.Name(), strings.Join(syn.Events, ", "))
		}
		groups, err := parseGroups(events[name], place, name, syn, c)
		if err != nil {
			return nil, err
		}
		if len(groups) > 0 && !slices.Contains(syn.Fired, name) {
			c.Warnings = append(c.Warnings, fmt.Sprintf("%s: dsh-sandbox never fires %s; its hooks will not run", place, name))
		}
		c.Events[name] = groups
	}
	return c, nil
}

type rawGroup struct {
	Matcher *string           `json:"matcher"`
	Hooks   []json.RawMessage `json:"hooks"`
}

type rawHook struct {
	Type       *string  `json:"type"`
	Command    *string  `json:"command"`
	Timeout    *float64 `json:"timeout"`
	TimeoutSec *float64 `json:"timeoutSec"`
	Async      *bool    `json:"async"`
}

func parseGroups(raw json.RawMessage, place, event string, syn Syntax, c *File) ([]Group, error) {
	var rgs []json.RawMessage
	if err := json.Unmarshal(raw, &rgs); err != nil {
		return nil, invalid("%s: want an array of matcher groups: %v", place, err)
	}
	var groups []Group
	for i, rg := range rgs {
		gplace := fmt.Sprintf("%s[%d]", place, i)
		var g rawGroup
		if err := strictObject(rg, &g); err != nil {
			return nil, invalid("%s: %v", gplace, err)
		}
		group := Group{}
		if g.Matcher != nil {
			group.Matcher = *g.Matcher
		}
		m, err := compileMatcher(group.Matcher, syn.ExactMatchers)
		if err != nil {
			return nil, invalid("%s.matcher: event %s: invalid pattern %q: %v", gplace, event, group.Matcher, err)
		}
		group.match = m
		for j, rh := range g.Hooks {
			hplace := fmt.Sprintf("%s.hooks[%d]", gplace, j)
			h, skip, err := parseHook(rh, hplace, syn)
			if err != nil {
				return nil, err
			}
			if skip != "" {
				c.Warnings = append(c.Warnings, hplace+": "+skip)
				continue
			}
			group.Hooks = append(group.Hooks, h)
		}
		groups = append(groups, group)
	}
	return groups, nil
}

func parseHook(raw json.RawMessage, place string, syn Syntax) (h Hook, skip string, err error) {
	var r rawHook
	if err := strictObject(raw, &r); err != nil {
		return Hook{}, "", invalid("%s: %v", place, err)
	}
	h = Hook{Place: place, Timeout: DefaultTimeout}
	timeout, key := r.Timeout, "timeout"
	if syn.TimeoutSec && r.TimeoutSec != nil {
		if r.Timeout != nil && *r.Timeout != *r.TimeoutSec {
			return Hook{}, "", invalid("%s: timeout (%v) and timeoutSec (%v) disagree", place, *r.Timeout, *r.TimeoutSec)
		}
		timeout, key = r.TimeoutSec, "timeoutSec"
	}
	if timeout != nil {
		s := *timeout
		switch {
		case s < 0 || math.IsNaN(s):
			return Hook{}, "", invalid("%s.%s: must not be negative, got %v", place, key, s)
		case s > float64(24*time.Hour/time.Second):
			return Hook{}, "", invalid("%s.%s: %v seconds is more than a day", place, key, s)
		case s > 0:
			h.Timeout = max(time.Duration(s*float64(time.Second)), time.Millisecond)
		}
	}
	typ := "command"
	if r.Type != nil {
		typ = *r.Type
	}
	switch typ {
	case "command":
	case "prompt", "agent":
		// Real hook types that need a model: accepted, never run.
		return Hook{}, fmt.Sprintf("skipped: type %q is not supported (only \"command\")", typ), nil
	default:
		return Hook{}, "", invalid("%s.type: %q is not a hook type (command, or prompt and agent, which are skipped)", place, typ)
	}
	if r.Command == nil || strings.TrimSpace(*r.Command) == "" {
		return Hook{}, "", invalid("%s.command: missing or empty", place)
	}
	if strings.ContainsRune(*r.Command, 0) {
		return Hook{}, "", invalid("%s.command: contains a NUL byte", place)
	}
	if syn.SkipAsync && r.Async != nil && *r.Async {
		return Hook{}, "skipped: async hooks are not supported", nil
	}
	h.Command = *r.Command
	return h, "", nil
}

// strictObject decodes a JSON object into v, refusing null, other JSON
// types and trailing data.
func strictObject(data []byte, v any) error {
	t := bytes.TrimSpace(data)
	if len(t) == 0 || t[0] != '{' {
		return fmt.Errorf("want a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(t))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the JSON object")
	}
	return nil
}

func invalid(format string, args ...any) error {
	return sandbox.Errorf(sandbox.ErrInvalid, format, args...)
}

// WithMounts returns p with the read-only bind mounts hook commands need:
// the directory holding the configuration file and, when pluginRoot is not
// empty, the plugin directory, each at its own path. A directory that a
// call of session s already sees (inside the mounted workspace or
// transcript directory, or at the target of one of p's mounts) is not
// mounted again. A directory that contains the workspace or the transcript
// directory cannot be mounted without exposing them (and other sessions)
// and is an error wrapping sandbox.ErrInvalid that names it. p is not
// modified; normalize the result before use.
func (c *File) WithMounts(p sandbox.Policy, s sandbox.Session, pluginRoot string) (sandbox.Policy, error) {
	var dirs []string
	if c.Path != "" {
		dirs = append(dirs, filepath.Dir(c.Path))
	}
	if pluginRoot != "" {
		if !filepath.IsAbs(pluginRoot) {
			return p, invalid("CLAUDE_PLUGIN_ROOT: %q is not an absolute path", pluginRoot)
		}
		dirs = append(dirs, filepath.Clean(pluginRoot))
	}
	// The session's mounts are those of the call's plan.
	names := map[sandbox.MountKind]string{sandbox.MountWorkspace: "the workspace", sandbox.MountTranscript: "the transcript directory"}
	var visible []sandbox.PlanMount
	for _, m := range sandbox.NewPlan(p, s, sandbox.Identity{}).Binds() {
		if names[m.Kind] != "" {
			visible = append(visible, m)
		}
	}
	mounts := slices.Clone(p.Mounts)
	for _, dir := range dirs {
		skip := slices.ContainsFunc(mounts, func(m sandbox.Mount) bool { return m.Target == dir })
		for _, v := range visible {
			switch {
			case within(dir, v.Target):
				skip = true
			case within(v.Target, dir):
				return p, invalid("hook directory %q contains %s %q; mounting it would expose more than the hooks: move the hook configuration", dir, names[v.Kind], v.Target)
			}
		}
		if !skip {
			mounts = append(mounts, sandbox.Mount{Source: dir, Target: dir, ReadOnly: true})
		}
	}
	p.Mounts = mounts
	return p, nil
}

// within reports whether path is dir or lies below it; both are clean
// absolute paths.
func within(path, dir string) bool {
	return path == dir || dir == "/" || strings.HasPrefix(path, dir+"/")
}

// presentedTool returns the dialect's name of the harness tool name,
// honouring the configuration's override.
func (c *File) presentedTool(d Dialect, internal string) string {
	if v, ok := c.ToolNames[internal]; ok {
		return v
	}
	return d.ToolName(internal)
}
