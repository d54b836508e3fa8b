package oci

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/idmap"
)

// bundleGofer is the directory of a bundle that holds the staging mounts
// of a runsc call's other binds, one numbered mount point per bind.
const bundleGofer = "gofer"

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
//     namespace, as runc does); stageForGofer answers that;
//   - remounts the root read-only when the spec says so, with flags that
//     drop nosuid and nodev, which the kernel refuses (EPERM) for a mount
//     whose flags are locked in its namespace: any root on a nosuid
//     file system (a /run tmpfs) or the call's overlay (mounted nosuid,
//     nodev). So the executor makes the root read-only itself, as a
//     mount of its own (the overlay, or the skeleton bound onto itself),
//     read-only, nosuid and nodev, and the spec no longer asks gVisor to
//     remount it; writes to it fail with EROFS as before.
//
// spec must be final otherwise; its binds and root are changed in place.
func (b *bundle) prepareGofer(spec *specs.Spec) error {
	if err := b.stageForGofer(spec); err != nil {
		return err
	}
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
		if sandbox.Within(m.Destination, cwd) {
			return mounts
		}
	}
	return append(mounts, specs.Mount{Destination: cwd})
}

// stageForGofer clones each bind source of spec that is not already an
// id-mapped staging mount (stageIdmapped) to a mount point in the
// bundle, whose directories others may search, and the spec binds that
// instead. The clone is a plain, non-recursive bind (no id mapping: the
// call sees owners as runc shows them to a call in a user namespace),
// nosuid and nodev, and read-only when the spec's bind is, so the
// gofer's own view is read-only too (it mounts binds without applying
// ro). Staging mounts that stageIdmapped made for read-only binds are
// made read-only as well. All of them are recorded in b, whose unmount
// removes them.
func (b *bundle) stageForGofer(spec *specs.Spec) error {
	dir := b.path(bundleGofer)
	if err := os.Mkdir(dir, 0o711); err != nil {
		return fmt.Errorf("gofer staging: %w", err)
	}
	n := 0
	for i := range spec.Mounts {
		m := &spec.Mounts[i]
		if m.Type != "bind" {
			continue
		}
		ro := slices.Contains(m.Options, "ro")
		if filepath.Dir(m.Source) == b.path(bundleIdmap) {
			if ro {
				if err := setMountAttr(m.Source, unix.MOUNT_ATTR_RDONLY); err != nil {
					return err
				}
			}
			continue
		}
		target := filepath.Join(dir, strconv.Itoa(n))
		n++
		var attrs uint64
		if ro {
			attrs = unix.MOUNT_ATTR_RDONLY
		}
		if err := idmap.StageAt(m.Source, target, -1, attrs); err != nil {
			return fmt.Errorf("gofer staging: %w", err)
		}
		b.staged = append(b.staged, target)
		m.Source = target
	}
	return nil
}

// setMountAttr sets attrs on the mount at path (a staging mount point
// the executor made), without following a link there.
func setMountAttr(path string, attrs uint64) error {
	if err := unix.MountSetattr(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, &unix.MountAttr{Attr_set: attrs}); err != nil {
		return fmt.Errorf("gofer staging: mount_setattr %s: %w", path, err)
	}
	return nil
}
