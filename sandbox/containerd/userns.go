package containerd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/mount"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/idmap"
)

// idmapDir is the directory under StateDir that holds, per instance and
// call, the staging mounts of the call's binds and, for a
// user-namespaced call, the mount point of its snapshot
// (containerd-idmap/<instance>/<call id>). Reap removes those of dead
// instances.
const idmapDir = "containerd-idmap"

// callDir is the call's directory under StateDir/containerd-idmap.
func (e *Executor) callDir(callID string) string {
	return filepath.Join(e.opts.StateDir, idmapDir, e.instance, callID)
}

// makeCallDir creates the call's directory, searchable by the call's
// mapped root (which walks through it to its rootfs).
func (e *Executor) makeCallDir(callID string) (string, error) {
	dir := e.callDir(callID)
	if err := os.MkdirAll(filepath.Dir(dir), 0o711); err != nil {
		return "", err
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		return "", err
	}
	return dir, nil
}

// stageBinds replaces the source of every bind of spec by a staging
// mount in dir, the call's directory (idmap.Stage): a clone of the
// source opened without following links, so the shim's runc, which
// mounts sources by path and follows links, mounts what
// prepare.Paths checked and never a symbolic link a call swapped
// in since. The binds whose destination is in mapped (the workspace,
// session directory and policy mounts of an id-mapped call) are
// id-mapped. The daemon and its runc shim run in this process's mount
// namespace, so the runc that bind-mounts them sees them. The staging
// mounts made are returned, also with an error; idmap.RemoveCallDir
// removes them.
func stageBinds(spec *specs.Spec, how idmap.Staging, dir string) ([]string, error) {
	return idmap.Stage(spec, how, dir, func(f func() error) error { return f() })
}

// rootfsDir is the mount point of a user-namespaced call's snapshot in
// its directory; the spec's root is this absolute path.
func rootfsDir(callDir string) string { return filepath.Join(callDir, "rootfs") }

// withoutShimRootfs detaches the snapshot WithNewSnapshot prepared from
// the container record, so that the shim does not mount it in its bundle
// (under the daemon's state directory, which the mapped root of a user
// namespace may not search): the executor mounts it itself (mountRootfs)
// in its own state directory. The snapshot keeps the container's id as
// key and the call's labels; deleteCall and Reap remove it by them. It
// is a GC root for the daemon until then (gcRootLabel).
func withoutShimRootfs() containerd.NewContainerOpts {
	return func(_ context.Context, _ *containerd.Client, c *containers.Container) error {
		c.SnapshotKey = ""
		return nil
	}
}

// gcRootLabel keeps the daemon's garbage collector off a snapshot that
// no container record references (withoutShimRootfs).
const gcRootLabel = "containerd.io/gc.root"

// mountRootfs makes the call's snapshot usable by a runc that runs the
// container in a user namespace: it mounts it at rootfsDir(dir), where
// it stays until the returned function detaches it, creates the mount
// points of the spec's mounts there (as root: the mapped root could not
// make them in image directories root owns) and gives the root directory
// to the host ids of the container's root (a copy-up into the call's own
// upper layer; the image layers are not touched), where runc creates
// what remains (/proc, /dev, …). The root is read-only to the call
// afterwards (root.readonly). Nothing else of the image is chowned: its
// files stay readable to the mapped ids through their modes for others,
// as they are to any unprivileged user. On error nothing stays mounted.
func (e *Executor) mountRootfs(ctx context.Context, key, dir string, spec *specs.Spec, uid, gid uint32) (func() error, error) {
	mounts, err := e.cli.SnapshotService(snapshotter).Mounts(ctx, key)
	if err != nil {
		return nil, classify(err, "snapshot %s: mounts", key)
	}
	target := rootfsDir(dir)
	if err := os.Mkdir(target, 0o711); err != nil {
		return nil, fmt.Errorf("rootfs: %w", err)
	}
	if err := mount.All(mounts, target); err != nil {
		_ = os.Remove(target)
		return nil, fmt.Errorf("rootfs: mount the snapshot: %w", err)
	}
	unmount := func() error {
		if err := mount.UnmountAll(target, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("rootfs: unmount the snapshot: %w", err)
		}
		if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("rootfs: %w", err)
		}
		return nil
	}
	if err := idmap.CheckRootfs(target, spec.Mounts); err != nil {
		return nil, errors.Join(sandbox.Errorf(sandbox.ErrInvalid, "containerd: image: %w", err), unmount())
	}
	if err := idmap.MountPoints(target, spec.Mounts); err != nil {
		return nil, errors.Join(fmt.Errorf("rootfs: %w", err), unmount())
	}
	if err := os.Lchown(target, int(uid), int(gid)); err != nil {
		return nil, errors.Join(fmt.Errorf("rootfs: %w", err), unmount())
	}
	return unmount, nil
}
