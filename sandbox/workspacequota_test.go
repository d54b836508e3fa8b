package sandbox

import (
	"errors"
	"strings"
	"testing"
)

// TestLimitWorkspaceFailsClosed: a policy that bounds a read-write
// workspace on a file system without project quotas (the test's
// temporary directory) is refused with ErrUnavailable naming the field;
// without the bound, or with a read-only workspace, nothing is asked of
// the file system.
func TestLimitWorkspaceFailsClosed(t *testing.T) {
	ws := t.TempDir()
	p := Policy{Workspace: WorkspaceRW, Transcript: TranscriptNone}
	s := Session{Cwd: ws}
	if err := limitWorkspace(p, NewPlan(p, s, Identity{}), ws); err != nil {
		t.Errorf("no bound: limitWorkspace = %v, want nil", err)
	}
	p.Limits.WorkspaceBytes = 1 << 20
	err := limitWorkspace(p, NewPlan(p, s, Identity{}), ws)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "policy.limits.workspaceBytes") {
		t.Errorf("bound on a file system without project quotas: limitWorkspace = %v, want ErrUnavailable naming policy.limits.workspaceBytes", err)
	}
	p.Workspace = WorkspaceRO
	if err := limitWorkspace(p, NewPlan(p, s, Identity{}), ws); err != nil {
		t.Errorf("read-only workspace: limitWorkspace = %v, want nil", err)
	}
}
