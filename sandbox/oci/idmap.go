package oci

import (
	"os"
	"path/filepath"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/idmap"
)

// userNamespace decides the user namespace of a call of policy p running
// as container uid:gid (idmap.ForCall): every runtime gives one, unless
// the policy says user: host-root. Under runsc the spec's namespace is
// the one gVisor's gofer runs in (the Sentry runs as host nobody in a
// namespace of its own); see prepareGofer and docs/identity.md.
func (e *Executor) userNamespace(p sandbox.Policy, uid, gid uint32) (idmap.IDs, error) {
	return idmap.ForCall("oci", p, uid, gid)
}

// ownRootfs gives the rootfs of the bundle to the host uid:gid the call's
// user namespace maps container root to, so that the runtime, which
// creates the remaining mount points (/dev, …) from inside the
// namespace, may write there; the root is read-only to the call
// afterwards. The host skeleton is given whole (directories and
// symbolic links the executor made); of an overlay only the root
// directory (a copy-up into the call's upper layer; the image is not
// touched).
func (b *bundle) ownRootfs(uid, gid uint32, overlay bool) error {
	root := b.path(bundleRootfs)
	if overlay {
		return b.inNamespace(func() error { return os.Lchown(root, int(uid), int(gid)) })
	}
	return filepath.WalkDir(root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(uid), int(gid))
	})
}
