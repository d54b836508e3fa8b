package request

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// locator answers every header with loc, ok.
type locator struct {
	loc persistence.Location
	ok  bool
}

func (l locator) Locate(session.Header) (persistence.Location, bool) { return l.loc, l.ok }

func TestSessionCase(t *testing.T) {
	h := &session.Header{ID: "s1", Cwd: "/srv/proj/"}
	jsonl := locator{persistence.Location{Kind: persistence.KindJSONL, Path: "/r/--srv-proj--/s1/session.jsonl.zstd"}, true}
	errRefused := errors.New("refused")
	tests := []struct {
		name    string
		h       *session.Header
		loc     persistence.Locator
		check   func(string) error
		want    sandbox.Session
		wantErr error
	}{
		{"no agent", nil, jsonl, nil, sandbox.Session{Cwd: "/srv/proj"}, nil},
		{"no locator", h, nil, nil, sandbox.Session{ID: "s1", Cwd: "/srv/proj"}, nil},
		{"jsonl", h, jsonl, nil, sandbox.Session{ID: "s1", Cwd: "/srv/proj", TranscriptDir: "/r/--srv-proj--/s1"}, nil},
		{"not located", h, locator{}, nil, sandbox.Session{ID: "s1", Cwd: "/srv/proj"}, nil},
		{"other kind", h, locator{persistence.Location{Kind: "sqlite", Path: "/db"}, true}, nil, sandbox.Session{ID: "s1", Cwd: "/srv/proj"}, nil},
		{"checked", h, jsonl, func(string) error { return nil }, sandbox.Session{ID: "s1", Cwd: "/srv/proj", TranscriptDir: "/r/--srv-proj--/s1"}, nil},
		{"refused", h, jsonl, func(string) error { return errRefused }, sandbox.Session{}, errRefused},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Session(tt.h, "/srv/proj", tt.loc, tt.check)
			if got != tt.want || !errors.Is(err, tt.wantErr) {
				t.Errorf("Session() = %+v, %v; want %+v, %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestBuild(t *testing.T) {
	pol, err := policy.Normalize(mustBuiltin(t, policy.WorkspaceWrite))
	if err != nil {
		t.Fatal(err)
	}
	owner := sandbox.Owner{UID: 1000, GID: 1000, Set: true}
	in := Input{
		Policy:    pol,
		Narrowing: policy.Narrowing{Pids: 7},
		Header:    &session.Header{ID: "s1", Cwd: "/w"},
		Workspace: "/w",
		Locator:   locator{persistence.Location{Kind: persistence.KindJSONL, Path: "/r/w/s1/session.jsonl"}, true},
		Snapshot:  func(context.Context) ([]string, error) { return []string{"DSH_SESSION_ID=s1"}, nil },
		Owner:     owner,
	}
	req, err := Build(t.Context(), in)
	if err != nil {
		t.Fatal(err)
	}
	if req.Policy.Limits.Pids != 7 || req.Session.TranscriptDir != "/r/w/s1" || req.Session.Owner != owner ||
		!slices.Equal(req.DSHEnv, []string{"DSH_SESSION_ID=s1"}) {
		t.Errorf("Build() = policy pids %d, session %+v, dshEnv %q; want pids 7, transcript /r/w/s1, owner, the snapshot",
			req.Policy.Limits.Pids, req.Session, req.DSHEnv)
	}

	// A widening is refused as a *policy.NarrowError naming the field.
	in.Narrowing = policy.Narrowing{Pids: pol.Limits.Pids + 1}
	_, err = Build(t.Context(), in)
	var ne *policy.NarrowError
	if !errors.As(err, &ne) || ne.Field != "pids" {
		t.Errorf("Build() widening pids = %v, want a NarrowError on pids", err)
	}

	// The snapshot's error fails the build as it is; hooks take none.
	in.Narrowing = policy.Narrowing{}
	errSnap := errors.New("no snapshot")
	in.Snapshot = func(context.Context) ([]string, error) { return nil, errSnap }
	if _, err := Build(t.Context(), in); !errors.Is(err, errSnap) {
		t.Errorf("Build() with a failing snapshot = %v, want %v", err, errSnap)
	}
	in.Snapshot = nil
	if req, err := Build(t.Context(), in); err != nil {
		t.Errorf("Build() without a snapshot = %v", err)
	} else if req.DSHEnv != nil {
		t.Errorf("Build() without a snapshot: dshEnv %q, want none", req.DSHEnv)
	}
}

func mustBuiltin(t *testing.T, name string) sandbox.Policy {
	t.Helper()
	p, ok := policy.Builtin(name)
	if !ok {
		t.Fatalf("no built-in policy %q", name)
	}
	return p
}
