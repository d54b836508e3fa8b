package hooks

import (
	"slices"
	"strings"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
)

// Dispatch is what runs for one event: the payload every matching hook
// gets on stdin, their environment and session, and the hooks themselves.
// NewDispatch makes it; it is read-only afterwards and safe for concurrent
// use.
type Dispatch struct {
	// Event is the event with its tool name as the dialect presents it.
	Event Event
	// Stdin is the exact payload bytes each hook reads.
	Stdin []byte
	// Env is the hooks' ordinary environment (the dialect's variables,
	// such as CLAUDE_PROJECT_DIR and CLAUDE_PLUGIN_ROOT), which is also how
	// placeholders in hook commands get their values: the hook's shell
	// expands them. Hooks never get a DSH_* snapshot.
	Env []string
	// Invocations are the matching hooks in file order, commands as
	// written (nothing is substituted into them); identical commands run
	// once.
	Invocations []Invocation
}

// Invocation is one hook to run.
type Invocation struct {
	Hook
	// Matcher is the pattern of the group that selected the hook.
	Matcher string
}

// NewDispatch matches ev against c and builds the payload in dialect d.
// It does no I/O besides loc.Locate: it creates, reads and flushes
// nothing. An event name the dialect does not fire, or a payload the
// dialect cannot build, is an error wrapping sandbox.ErrInvalid.
func NewDispatch(c *File, d Dialect, ev Event, loc persistence.Locator, pluginRoot string) (*Dispatch, error) {
	syn := d.Syntax()
	if !slices.Contains(syn.Fired, ev.Name) {
		return nil, invalid("event: %q is not an event %s hooks run for (one of %s)", ev.Name, d.Name(), strings.Join(syn.Fired, ", "))
	}
	if ev.ToolName != "" {
		ev.ToolName = c.presentedTool(d, ev.ToolName)
	}
	stdin, err := d.Payload(ev, loc)
	if err != nil {
		return nil, err
	}
	p := &Dispatch{Event: ev, Stdin: stdin, Env: d.Env(ev, pluginRoot)}
	seen := map[string]bool{}
	for _, g := range c.Events[ev.Name] {
		if !g.Matches(ev) {
			continue
		}
		for _, h := range g.Hooks {
			// The command stays as written: placeholders such as
			// ${CLAUDE_PROJECT_DIR} are in p.Env for the hook's shell to
			// expand. Pasting a value into the command would let a
			// directory name like `";touch x;"` run as code.
			if seen[h.Command] {
				continue
			}
			seen[h.Command] = true
			p.Invocations = append(p.Invocations, Invocation{Hook: h, Matcher: g.Matcher})
		}
	}
	return p, nil
}
