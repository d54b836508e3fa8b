package api

import (
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestAuditMountsArePlanBinds: the audit record lists exactly the binds
// of the call's plan (policy.Plan), the host paths the backend mounted,
// in mount order and with their kind and flags; a refused plan lists
// none.
func TestAuditMountsArePlanBinds(t *testing.T) {
	base, ok := policy.Builtin(policy.WorkspaceWrite)
	if !ok {
		t.Fatal("no built-in workspace-write")
	}
	withMounts := base
	withMounts.Mounts = []sandbox.Mount{{Source: "/var/cache/x", Target: "/cache"}, {Source: "/srv/ref/a", Target: "/ref", ReadOnly: true, FromRoot: true}}
	readOnly := base
	readOnly.Workspace, readOnly.Transcript = sandbox.WorkspaceRO, sandbox.TranscriptNone
	none := base
	none.Workspace = sandbox.WorkspaceNone
	both := sandbox.Session{ID: "s1", Cwd: "/srv/project", TranscriptDir: "/home/u/.dsh/sessions/p/s1"}
	for _, tc := range []struct {
		name      string
		p         sandbox.Policy
		s         sandbox.Session
		wantBinds int
	}{
		{"no session", base, sandbox.Session{}, 0},
		{"workspace and transcript", base, both, 2},
		{"policy and requested mounts", withMounts, both, 4},
		{"read-only workspace, no transcript", readOnly, both, 1},
		{"workspace none", none, both, 1},
	} {
		req := &sandbox.Request{Command: "true", Policy: tc.p, Session: tc.s}
		rec := auditRecord(req, "", false, 0, nil, nil)
		plan, err := policy.Plan(tc.p, tc.s, policy.Identity{})
		if err != nil {
			t.Fatalf("%s: Plan() = %v", tc.name, err)
		}
		binds := plan.Binds()
		if len(rec.Mounts) != len(binds) || len(binds) != tc.wantBinds {
			t.Fatalf("%s: record mounts %+v, plan binds %+v; want %d each", tc.name, rec.Mounts, binds, tc.wantBinds)
		}
		for i, m := range binds {
			want := AuditMount{Kind: m.Kind, Source: m.Source, Target: m.Target, ReadOnly: !m.Writable, NoExec: m.NoExec}
			if rec.Mounts[i] != want {
				t.Errorf("%s: record mount %d = %+v, want %+v", tc.name, i, rec.Mounts[i], want)
			}
		}
	}
	bad := base
	bad.Mounts = []sandbox.Mount{{Source: "/x", Target: "/srv/project/sub"}}
	if rec := auditRecord(&sandbox.Request{Command: "true", Policy: bad, Session: sandbox.Session{Cwd: "/srv/project"}}, "", false, 0, nil, nil); len(rec.Mounts) != 0 {
		t.Errorf("record of a refused plan lists mounts %+v, want none", rec.Mounts)
	}
}
