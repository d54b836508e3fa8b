package prepare

import (
	"errors"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/quota"
)

// limitWorkspace bounds the workspace ws of a call with plan pl under
// policy p to p.Limits.WorkspaceBytes (quota.Limit: a btrfs qgroup limit
// or a project quota), when the policy sets the limit and the call may
// write the workspace. Where it cannot be enforced the call is refused
// (ErrUnavailable): a bound the policy demands is never dropped.
func limitWorkspace(p sandbox.Policy, pl sandbox.Plan, ws string) error {
	m, ok := pl.Mount(sandbox.MountWorkspace)
	if p.Limits.WorkspaceBytes <= 0 || !ok || !m.Writable {
		return nil
	}
	if _, err := quota.Limit(ws, p.Limits.WorkspaceBytes); err != nil {
		if errors.Is(err, quota.ErrUnsupported) {
			return sandbox.Errorf(sandbox.ErrUnavailable, "sandbox: policy.limits.workspaceBytes cannot be enforced on the workspace: %v", err)
		}
		return sandbox.Errorf(sandbox.ErrUnavailable, "sandbox: policy.limits.workspaceBytes: %v", err)
	}
	return nil
}
