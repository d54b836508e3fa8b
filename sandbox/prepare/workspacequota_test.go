package prepare

import (
	"errors"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestLimitWorkspaceFailsClosed: a policy that bounds a read-write
// workspace on a file system without project quotas (the test's
// temporary directory) is refused with ErrUnavailable naming the field;
// without the bound, or with a read-only workspace, nothing is asked of
// the file system.
func TestLimitWorkspaceFailsClosed(t *testing.T) {
	ws := t.TempDir()
	p := sandbox.Policy{Workspace: sandbox.WorkspaceRW, Transcript: sandbox.TranscriptNone}
	s := sandbox.Session{Cwd: ws}
	if err := limitWorkspace(p, sandbox.NewPlan(p, s, sandbox.Identity{}), ws); err != nil {
		t.Errorf("no bound: limitWorkspace = %v, want nil", err)
	}
	p.Limits.WorkspaceBytes = 1 << 20
	err := limitWorkspace(p, sandbox.NewPlan(p, s, sandbox.Identity{}), ws)
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "policy.limits.workspaceBytes") {
		t.Errorf("bound on a file system without project quotas: limitWorkspace = %v, want ErrUnavailable naming policy.limits.workspaceBytes", err)
	}
	p.Workspace = sandbox.WorkspaceRO
	if err := limitWorkspace(p, sandbox.NewPlan(p, s, sandbox.Identity{}), ws); err != nil {
		t.Errorf("read-only workspace: limitWorkspace = %v, want nil", err)
	}
}
