package hooks

import (
	"regexp"
	"strings"
)

// matcher selects hooks by a value of the event: the presented tool name
// on tool events, the source on SessionStart. A nil matcher matches
// everything.
type matcher func(value string) bool

// compileMatcher compiles a pattern. "" and "*" match everything. With
// exact (Claude Code), a pattern of only [A-Za-z0-9_|] is an alternation
// of exact names ("Edit|Write"); anything else is an unanchored regular
// expression (Go RE2 syntax).
func compileMatcher(pattern string, exact bool) (matcher, error) {
	if pattern == "" || pattern == "*" {
		return nil, nil
	}
	if exact && isPlainAlternation(pattern) {
		names := strings.Split(pattern, "|")
		return func(v string) bool {
			for _, n := range names {
				if n == v {
					return true
				}
			}
			return false
		}, nil
	}
	re, err := regexp.Compile(pattern)
	if err != nil {
		return nil, err
	}
	return re.MatchString, nil
}

func isPlainAlternation(p string) bool {
	for _, r := range p {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '|':
		default:
			return false
		}
	}
	return true
}

// matchValue returns the value the matchers of ev's event look at, and
// false for events whose matchers are ignored (every group matches).
func matchValue(ev Event) (string, bool) {
	switch ev.Name {
	case PreToolUse, PostToolUse:
		return ev.ToolName, true
	case SessionStart:
		return ev.Source, true
	}
	return "", false
}

// Matches reports whether the group's matcher selects ev, whose ToolName
// is the presented name. Only groups made by Parse carry a compiled
// matcher; a Group built by hand matches every event.
func (g Group) Matches(ev Event) bool {
	v, ok := matchValue(ev)
	if !ok || g.match == nil {
		return true
	}
	return g.match(v)
}
