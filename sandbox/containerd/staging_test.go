package containerd

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
)

// swapRunner is the executor with swap run right after Prepare, when the
// container exists and before the shim's runc mounts anything.
type swapRunner struct {
	*runner
	swap func() error
}

func (r swapRunner) Prepare(ctx context.Context, call *driver.Running, pl *plan) (driver.Slot, error) {
	c, err := r.runner.Prepare(ctx, call, pl)
	if err != nil {
		return c, err
	}
	return c, r.swap()
}

// TestBindSwappedForLink swaps the call's checked workspace for a
// symbolic link to another directory after prepare.Paths and
// Prepare, before the task starts (sandboxtest.LinkSwap): the call still
// sees the directory that was checked, since runc mounts the staging
// mount and never the link's target. With a user namespace (a
// root-owned, id-mapped workspace, and one of uid 1000) and without.
func TestBindSwappedForLink(t *testing.T) {
	e := newTestExecutor(t)
	for _, v := range []struct {
		name  string
		user  sandbox.User
		owner int
	}{{"idmap", "auto", 0}, {"userns", "auto", 1000}, {"host-root", policy.UserHostRoot, 0}} {
		t.Run(v.name, func(t *testing.T) {
			s := sandboxtest.NewLinkSwap(t, v.owner)
			p := testPolicy(t)
			p.User = v.user
			res, err := driver.Run(t.Context(), swapRunner{runner: (*runner)(e), swap: s.Swap}, s.Request(p))
			s.Check(t, res, err)
			if left := leftovers(t, e); len(left) > 0 {
				t.Errorf("left behind: %q", left)
			}
			if calls, _ := os.ReadDir(filepath.Dir(e.callDir("x"))); len(calls) > 0 {
				t.Errorf("call directories left behind: %v", calls)
			}
		})
	}
}
