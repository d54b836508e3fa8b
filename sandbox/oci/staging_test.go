package oci

import (
	"context"
	"fmt"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
)

// TestBindSwappedForLink swaps the call's checked workspace for a
// symbolic link to another directory after prepare.Paths
// (sandboxtest.LinkSwap):
//   - after the binds are staged and before the runtime starts, the call
//     still sees the directory that was checked (the runtime mounts the
//     staging mount, never the link's target);
//   - before they are staged, the call fails and never runs (the source
//     is opened without following links).
//
// With a user namespace (a root-owned, id-mapped workspace, and one of
// uid 1000) and without.
func TestBindSwappedForLink(t *testing.T) {
	type variant struct {
		name  string
		user  sandbox.User
		owner int
	}
	for _, rt := range runtimes {
		for _, v := range []variant{{"idmap", "auto", 0}, {"userns", "auto", 1000}, {"host-root", policy.UserHostRoot, 0}} {
			for _, step := range []string{"start", "binds"} {
				t.Run(fmt.Sprintf("%s/%s/%s", rt, v.name, step), func(t *testing.T) {
					e := newTestExecutor(t, rt)
					s := sandboxtest.NewLinkSwap(t, v.owner)
					p := testPolicy(t, rt)
					p.User = v.user
					e.inject = func(name string) error {
						if name != step {
							return nil
						}
						return s.Swap()
					}
					defer func() { e.inject = nil }()
					res, err := e.Run(context.Background(), s.Request(p))
					if step == "binds" {
						s.CheckRefused(t, res, err)
					} else {
						s.Check(t, res, err)
					}
					if left := leftovers(t, e); len(left) > 0 {
						t.Errorf("left behind: %q", left)
					}
				})
			}
		}
	}
}
