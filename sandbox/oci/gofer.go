package oci

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/hostpath"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// prepareGofer adapts the bundle of a runsc call that runs in a user
// namespace to gVisor's gofer. The gofer of runsc 20221219 joins the
// spec's user namespace, as its mapped root (host uid 2^31), and from
// there
//
//   - opens each bind source by its path: a source below a directory
//     others may not search (the host image's generated /etc in the state
//     directory, a session directory below a 0700 directory) fails the
//     whole call with "cannot read client sync file: waiting for sandbox
//     to start: EOF" (newer gVisor falls back to opening it outside the
//     namespace, as runc does); stageBinds answers that, with every
//     source a staging mount in the bundle, read-only where the bind is
//     (the gofer mounts binds without applying ro);
//   - remounts the root read-only when the spec says so, with flags that
//     drop nosuid and nodev, which the kernel refuses (EPERM) for a mount
//     whose flags are locked in its namespace: any root on a nosuid
//     file system (a /run tmpfs) or the call's overlay (mounted nosuid,
//     nodev). So the executor makes the root read-only itself, as a
//     mount of its own (the overlay, or the skeleton bound onto itself),
//     read-only, nosuid and nodev, and the spec no longer asks gVisor to
//     remount it; writes to it fail with EROFS as before.
//
// spec must be final otherwise, its binds staged (stageBinds); its root
// is changed in place.
func (b *bundle) prepareGofer(spec *specs.Spec) error {
	root := b.path(bundleRootfs)
	if !b.mounted {
		if err := unix.Mount(root, root, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("read-only root: %w", err)
		}
		b.staged = append(b.staged, root)
	}
	if err := setMountAttr(root, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
		return err
	}
	if spec.Root != nil {
		spec.Root.Readonly = false
	}
	return nil
}

// goferMountPoints are the paths the executor makes in the root of a
// runsc call in a user namespace before it turns read-only, as mounts
// for bundle.mountPoints: the mount points of every mount but the tmpfs
// ones, and the process's working directory. gVisor's gofer mounts only
// the binds, each at its path in the root as the host sees it (a bind
// below the spec's /tmp tmpfs too), and creates the working directory
// there; it cannot create either in the read-only root. The Sentry
// mounts its tmpfs over whatever is there.
func goferMountPoints(spec *specs.Spec) []specs.Mount {
	mounts := slices.DeleteFunc(slices.Clone(spec.Mounts), func(m specs.Mount) bool { return m.Type == "tmpfs" })
	if spec.Process == nil || !filepath.IsAbs(spec.Process.Cwd) {
		return mounts
	}
	// The working directory as one more directory to make, unless a
	// mount point lies at or below it (making that one makes it; and
	// mountPoints skips what lies inside another entry).
	cwd := spec.Process.Cwd
	for _, m := range mounts {
		if hostpath.Within(m.Destination, cwd) {
			return mounts
		}
	}
	return append(mounts, specs.Mount{Destination: cwd})
}

// setMountAttr sets attrs on the mount at path (a mount the executor
// made in the bundle), without following a link there.
func setMountAttr(path string, attrs uint64) error {
	if err := unix.MountSetattr(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, &unix.MountAttr{Attr_set: attrs}); err != nil {
		return fmt.Errorf("mount_setattr %s: %w", path, err)
	}
	return nil
}
