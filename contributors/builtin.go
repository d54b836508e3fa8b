package contributors

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
)

// Names of the built-in contributors, as List shows them.
const (
	NameHome       = "dsh.home"
	NameSession    = "dsh.session"
	NameTranscript = "dsh.transcript"
)

// Install registers the three built-in contributors in r through its
// built-in path and returns a disposer that removes all of them (safe to
// call more than once).
//
// current is called once per Collect, at execution time, to get the
// persistence that answers Locate for DSH_SESSION_JSONL; it may return nil
// for "no persistence". Pass LocatorHolder.Get to let the wiring swap the
// service: later snapshots follow the swap, earlier ones keep their values.
//
// Install fails when r or current is nil, or when a built-in key is
// already owned (for example when Install ran twice); it then leaves r as
// it was.
func Install(r *overlay.Registry, current func() persistence.Locator) (dispose func(), err error) {
	if r == nil {
		return nil, errors.New("contributors: Install: registry is nil")
	}
	if current == nil {
		return nil, errors.New("contributors: Install: locator provider is nil")
	}
	all := []overlay.Contributor{
		homeContributor(),
		sessionContributor(),
		transcriptContributor(current),
	}
	var disposers []func()
	disposeAll := func() {
		for _, d := range disposers {
			d()
		}
	}
	for _, c := range all {
		d, err := r.RegisterBuiltIn(c)
		if err != nil {
			disposeAll()
			return nil, fmt.Errorf("contributors: Install: %w", err)
		}
		disposers = append(disposers, d)
	}
	return disposeAll, nil
}

func homeContributor() overlay.Contributor {
	return overlay.Contributor{
		Name: NameHome,
		Keys: []overlay.KeyDecl{
			{Key: overlay.KeyHome, Description: "absolute path of the dsh home directory"},
			{Key: overlay.KeyShell, Description: `always "1": the command runs in a dsh shell call`},
		},
		Resolve: func(_ context.Context, x overlay.Execution) (map[string]any, error) {
			if !filepath.IsAbs(x.Home) {
				return nil, fmt.Errorf("execution home %q is not an absolute path", x.Home)
			}
			return map[string]any{overlay.KeyHome: x.Home, overlay.KeyShell: "1"}, nil
		},
	}
}

func sessionContributor() overlay.Contributor {
	return overlay.Contributor{
		Name: NameSession,
		Keys: []overlay.KeyDecl{
			{Key: overlay.KeySessionID, Description: "id of the calling agent's session; absent for a call with no agent"},
		},
		Resolve: func(_ context.Context, x overlay.Execution) (map[string]any, error) {
			if x.Session == nil {
				return nil, nil
			}
			if x.Session.ID == "" {
				return nil, errors.New("execution session header has an empty id")
			}
			return map[string]any{overlay.KeySessionID: x.Session.ID}, nil
		},
	}
}

func transcriptContributor(current func() persistence.Locator) overlay.Contributor {
	return overlay.Contributor{
		Name: NameTranscript,
		Keys: []overlay.KeyDecl{
			{Key: overlay.KeySessionJSONL, Description: "absolute path of the session's JSONL transcript (mounted read-only); absent when the current persistence has no such file"},
		},
		Resolve: func(_ context.Context, x overlay.Execution) (map[string]any, error) {
			if x.Session == nil {
				return nil, nil
			}
			l := current()
			if l == nil {
				return nil, nil
			}
			loc, ok := l.Locate(*x.Session)
			if !ok || loc.Kind != persistence.KindJSONL {
				return nil, nil
			}
			if !filepath.IsAbs(loc.Path) {
				return nil, fmt.Errorf("persistence located session %q at %q, which is not an absolute path", x.Session.ID, loc.Path)
			}
			return map[string]any{overlay.KeySessionJSONL: loc.Path}, nil
		},
	}
}
