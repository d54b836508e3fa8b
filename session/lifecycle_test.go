package session

import (
	"reflect"
	"regexp"
	"testing"
	"time"
)

var idPattern = regexp.MustCompile(`^session-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestNewIDFormat(t *testing.T) {
	seen := make(map[string]bool)
	for range 1000 {
		id := NewID()
		if !idPattern.MatchString(id) {
			t.Fatalf("NewID() = %q, want session-<uuid v4>", id)
		}
		if seen[id] {
			t.Fatalf("NewID() returned %q twice", id)
		}
		seen[id] = true
	}
}

var now = time.UnixMilli(1700000000123)

func TestNewCases(t *testing.T) {
	for _, cwd := range []string{"/srv/app", ""} {
		h := New(cwd, now)
		if !idPattern.MatchString(h.ID) || h.CreatedAt != now.UnixMilli() || h.Cwd != cwd {
			t.Errorf("New(%q, now) = %+v, want a new id, createdAt %d, cwd %q", cwd, h, now.UnixMilli(), cwd)
		}
		if h.ParentSession != "" || h.SeedLength != nil || h.Origin != "" || h.DelegationDepth != 0 || h.AgentPreset != "" {
			t.Errorf("New(%q, now) = %+v, want no lineage", cwd, h)
		}
		if err := h.Validate(); err != nil {
			t.Errorf("New(%q, now).Validate() = %v", cwd, err)
		}
	}
}

func TestResumeKeepsHeader(t *testing.T) {
	src := Header{ID: "s-1", CreatedAt: 5, Cwd: "/w", ParentSession: "p", SeedLength: int64p(3), DelegationDepth: 1, Origin: OriginSubagent, AgentPreset: "x"}
	if got := Resume(src); !reflect.DeepEqual(got, src) {
		t.Errorf("Resume(%+v) = %+v, want the same header", src, got)
	}
}

func TestForkCases(t *testing.T) {
	tests := []struct {
		name string
		src  Header
		seed int64
	}{
		{"top-level", Header{ID: "src", CreatedAt: 1, Cwd: "/w", AgentPreset: "minimal"}, 12},
		{"fork of a subagent keeps depth and origin", Header{ID: "child", CreatedAt: 1, Cwd: "/w", ParentSession: "root", Origin: OriginSubagent, DelegationDepth: 2}, 0},
		{"fork of a fork replaces the seed", Header{ID: "f1", CreatedAt: 1, ParentSession: "src", SeedLength: int64p(4)}, 9},
	}
	for _, tt := range tests {
		got := Fork(tt.src, tt.seed, now)
		want := tt.src
		want.ID = got.ID
		want.CreatedAt = now.UnixMilli()
		want.ParentSession = tt.src.ID
		want.SeedLength = int64p(tt.seed)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Fork(%+v, %d) = %+v, want %+v", tt.name, tt.src, tt.seed, got, want)
		}
		if got.ID == tt.src.ID || !idPattern.MatchString(got.ID) {
			t.Errorf("%s: Fork id %q, want a fresh session id", tt.name, got.ID)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%s: Fork(...).Validate() = %v", tt.name, err)
		}
	}
	// The seed is the fork's own: changing the source's does not move it.
	src := Header{ID: "s", CreatedAt: 1, SeedLength: int64p(1)}
	f := Fork(src, 7, now)
	*src.SeedLength = 100
	if *f.SeedLength != 7 {
		t.Errorf("Fork seedLength = %d after changing the source, want 7", *f.SeedLength)
	}
}

func TestSpawnCases(t *testing.T) {
	tests := []struct {
		name   string
		parent Header
		preset string
	}{
		{"from a top-level session", Header{ID: "root", CreatedAt: 1, Cwd: "/w", AgentPreset: "parent-preset"}, ""},
		{"from a forked subagent, with a preset", Header{ID: "mid", CreatedAt: 1, Cwd: "/w", ParentSession: "root", SeedLength: int64p(5), Origin: OriginSubagent, DelegationDepth: 1}, "explorer"},
		{"without cwd", Header{ID: "nocwd", CreatedAt: 1}, ""},
	}
	for _, tt := range tests {
		got := Spawn(tt.parent, tt.preset, now)
		want := Header{
			ID:              got.ID,
			CreatedAt:       now.UnixMilli(),
			Cwd:             tt.parent.Cwd,
			ParentSession:   tt.parent.ID,
			Origin:          OriginSubagent,
			DelegationDepth: tt.parent.DelegationDepth + 1,
			AgentPreset:     tt.preset,
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: Spawn(%+v, %q) = %+v, want %+v", tt.name, tt.parent, tt.preset, got, want)
		}
		if got.ID == tt.parent.ID || !idPattern.MatchString(got.ID) {
			t.Errorf("%s: Spawn id %q, want a fresh session id", tt.name, got.ID)
		}
		line, err := got.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: MarshalJSON() = %v", tt.name, err)
		}
		back, err := Parse(line)
		if err != nil || !reflect.DeepEqual(back, got) {
			t.Errorf("%s: Parse(%s) = %+v, %v, want %+v", tt.name, line, back, err, got)
		}
	}
}
