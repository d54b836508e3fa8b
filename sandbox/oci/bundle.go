package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/idmap"
)

// Files inside a bundle directory.
const (
	bundleConfig = "config.json"
	bundleRootfs = "rootfs"
	bundleMarker = "dsh-sandbox.json"
	bundlePid    = "container.pid"
	bundleLog    = "runtime.log"
	// bundleBound names the call a container prepared ahead of its call
	// (the warm pool) was bound to: its spill files are named after it,
	// and reap finds them through it.
	bundleBound = "bound-call"
	// bundleBinds holds the staging mounts of the call's binds, one
	// numbered mount point per bind (stageBinds).
	bundleBinds = "binds"
)

// marker is written into a bundle right after its directory is created,
// before anything else, so that Reap can tell whose bundle it is and
// what to remove even when config.json was never written.
type marker struct {
	Instance  string `json:"instance"`
	Runtime   string `json:"runtime"`
	Container string `json:"container"`
	// Cgroups are the absolute cgroup directories the container gets
	// (one per hierarchy), computed before it is created.
	Cgroups []string `json:"cgroups,omitempty"`
	// Overlay is true when rootfs is an overlay mounted on the host.
	Overlay bool `json:"overlay,omitempty"`
}

// bundle is one call's bundle directory. Not safe for concurrent use.
type bundle struct {
	dir     string
	mounted bool // an overlay is mounted at rootfs
	// ns, when set, is the mount namespace the runtime runs in; the
	// overlay is mounted there, where the runtime sees it.
	ns *mountNamespace
	// oom, when set, tells whether the call ran out of memory (see
	// prepareOOMAccounting); the cleanup stack closes it.
	oom *oomWatch
	// staged are the staging mounts in the bundle (stageBinds, and the
	// read-only root of prepareGofer); unmount removes them.
	staged []string
	// mounts are the mounts of the container's spec, as it was written;
	// hostUID and hostGID the host ids of its process (idmap.CallHostIDs),
	// or hostIDsErr: what a session directory mounted at Bind needs.
	mounts           []specs.Mount
	hostUID, hostGID uint32
	hostIDsErr       error
	// rootUID and rootGID are the host ids of the container's root (0
	// without a user namespace): what the executor creates in the
	// container's own file systems belongs to it.
	rootUID, rootGID uint32
	// tasks is the call's task limit (0: none) when the container runs
	// the stub: its pids.max is higher by stubTaskReserve until Bind
	// (see limitTasks).
	tasks int64
}

// inNamespace runs f in the runtime's mount namespace.
func (b *bundle) inNamespace(f func() error) error {
	if b.ns == nil {
		return f()
	}
	return b.ns.do(f)
}

func (b *bundle) path(name string) string { return filepath.Join(b.dir, name) }

// createBundle makes dir (0711, which must not exist yet: the mapped
// root of a user namespace walks through it to the rootfs; the files in
// it are 0600) and writes the marker into it.
func createBundle(dir string, m marker) (*bundle, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, fmt.Errorf("bundle parent: %w", err)
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	b := &bundle{dir: dir}
	if err := b.writeMarker(m); err != nil {
		return b, err
	}
	return b, nil
}

func (b *bundle) writeMarker(m marker) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return os.WriteFile(b.path(bundleMarker), data, 0o600)
}

// readMarker reads the marker of the bundle in dir.
func readMarker(dir string) (marker, error) {
	var m marker
	data, err := os.ReadFile(filepath.Join(dir, bundleMarker))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("bundle marker %s: %w", dir, err)
	}
	return m, nil
}

// hostRootfs builds the per-call skeleton root of the `host` image: an
// empty directory that receives the image's symlinks (a merged-/usr
// /bin -> usr/bin) and, later, mount points. It returns the image's binds
// as read-only spec mounts, in order.
func (b *bundle) hostRootfs(binds []bindMount, symlinks map[string]string) ([]specs.Mount, error) {
	if err := os.Mkdir(b.path(bundleRootfs), 0o755); err != nil {
		return nil, fmt.Errorf("rootfs skeleton: %w", err)
	}
	root, err := os.OpenRoot(b.path(bundleRootfs))
	if err != nil {
		return nil, fmt.Errorf("rootfs skeleton: %w", err)
	}
	defer root.Close()
	for target, text := range symlinks {
		rel := strings.TrimPrefix(filepath.Clean(target), "/")
		if rel == "" || rel == "." || !filepath.IsAbs(target) {
			return nil, fmt.Errorf("rootfs skeleton: symlink %q is not below /", target)
		}
		if err := root.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
			return nil, fmt.Errorf("rootfs skeleton: %w", err)
		}
		if err := root.Symlink(text, rel); err != nil {
			return nil, fmt.Errorf("rootfs skeleton: %w", err)
		}
	}
	mounts := make([]specs.Mount, 0, len(binds))
	for _, bd := range binds {
		mounts = append(mounts, roBind(bd.Source, bd.Target))
	}
	return mounts, nil
}

// mountPoints creates, in the skeleton root, the mount point of every
// mount that does not lie inside another mount (idmap.MountPoints).
func (b *bundle) mountPoints(mounts []specs.Mount) error {
	return idmap.MountPoints(b.path(bundleRootfs), mounts)
}

// overlayRootfs mounts an overlay at rootfs with the image rootfs as its
// only, never written, lower layer and a per-call upper in the bundle.
// The runtime creates mount points in the upper; the container still
// sees its root read-only (root.readonly in the spec).
func (b *bundle) overlayRootfs(lower string) error {
	if strings.ContainsAny(lower, ",:") || strings.ContainsAny(b.dir, ",:") {
		return fmt.Errorf("overlay: path %q or %q contains ',' or ':'", lower, b.dir)
	}
	upper, work, root := b.path("upper"), b.path("work"), b.path(bundleRootfs)
	for _, d := range []string{upper, work, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("overlay: %w", err)
		}
	}
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work
	if err := b.inNamespace(func() error {
		return unix.Mount("overlay", root, "overlay", unix.MS_NODEV|unix.MS_NOSUID, opts)
	}); err != nil {
		return fmt.Errorf("overlay at %s: %w", root, err)
	}
	b.mounted = true
	return nil
}

// writeConfig writes config.json (0600).
func (b *bundle) writeConfig(s *specs.Spec) error {
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	if err := os.WriteFile(b.path(bundleConfig), data, 0o600); err != nil {
		return fmt.Errorf("config.json: %w", err)
	}
	return nil
}

// checkRootfs refuses a rootfs whose mount destinations or runtime
// paths (/dev, /proc, …) hold a symbolic link (idmap.CheckRootfs): the
// runtimes follow such a link on the host (CVE-2026-41579 and
// relatives).
func (b *bundle) checkRootfs(spec *specs.Spec) error {
	return b.inNamespace(func() error { return idmap.CheckRootfs(b.path(bundleRootfs), spec.Mounts) })
}

// stageBinds replaces the source of every bind of spec by a staging
// mount in the bundle (idmap.Stage), which no call can write: a clone of
// the source opened without following links, so the runtime, which
// mounts sources by path and follows links, mounts what
// prepare.Paths checked and never a symbolic link a call swapped
// in since (a rename loop in a writable mount root). The binds whose
// destination is in mapped are id-mapped with the spec's id maps. The
// staging directory is 0711: the runtime (runsc's gofer) may mount from
// within the call's user namespace. The mounts are made in the runtime's
// mount namespace and recorded in b, whose unmount removes them, also
// after an error.
func (b *bundle) stageBinds(spec *specs.Spec, how idmap.Staging) error {
	dir := b.path(bundleBinds)
	if err := os.Mkdir(dir, 0o711); err != nil {
		return fmt.Errorf("bind staging: %w", err)
	}
	staged, err := idmap.Stage(spec, how, dir, b.inNamespace)
	b.staged = append(b.staged, staged...)
	if err != nil {
		return fmt.Errorf("bind staging: %w", err)
	}
	return nil
}

// unmount unmounts the staging mounts and the overlay, lazily
// when they are busy.
func (b *bundle) unmount() error {
	for len(b.staged) > 0 {
		p := b.staged[len(b.staged)-1]
		if err := b.inNamespace(func() error {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("unmount %s: %w", p, err)
			}
			return nil
		}); err != nil {
			return err
		}
		b.staged = b.staged[:len(b.staged)-1]
	}
	if !b.mounted {
		return nil
	}
	root := b.path(bundleRootfs)
	err := b.inNamespace(func() error {
		if err := unix.Unmount(root, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			if err := unix.Unmount(root, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
				return fmt.Errorf("unmount %s: %w", root, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	b.mounted = false
	return nil
}

// remove unmounts what is mounted and deletes the bundle directory. It
// refuses to delete while anything is still mounted below the bundle, so
// that a removal can never reach through a mount into other files.
func (b *bundle) remove() error {
	if err := b.unmount(); err != nil {
		return err
	}
	var left []string
	err := b.inNamespace(func() (err error) {
		left, err = mountsUnder(b.dir)
		return err
	})
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("bundle %s: still mounted: %s", b.dir, strings.Join(left, ", "))
	}
	if err := removeBundleDir(b.dir); err != nil {
		return fmt.Errorf("bundle %s: %w", b.dir, err)
	}
	return nil
}

// removeBundleDir removes the bundle directory dir with the files that
// name its call last: the marker, then the bound call's id. A removal
// cut short (the service killed during it, or a file it cannot remove)
// leaves a bundle that still says whose it is, which Reap removes at
// once when its instance is dead, rather than one without a marker,
// whose fresh modification time makes Reap wait unmarkedBundleSettle.
func removeBundleDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, ent := range entries {
		if name := ent.Name(); name != bundleMarker && name != bundleBound {
			if err := os.RemoveAll(filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	for _, name := range []string{bundleMarker, bundleBound} {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return os.Remove(dir)
}

// bindMount is an image bind as the bundle needs it.
type bindMount struct{ Source, Target string }

// findShell returns the absolute in-image path of bash in rootfs ("/" for
// the host), or "" when there is none; sh reports whether /bin/sh exists.
func findShell(rootfs string) (bash string, sh bool) {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return "", false
	}
	defer root.Close()
	for _, p := range []string{"bin/bash", "usr/bin/bash", "usr/local/bin/bash"} {
		if fi, err := root.Stat(p); err == nil && fi.Mode().IsRegular() {
			return "/" + p, true
		}
	}
	fi, err := root.Stat("bin/sh")
	return "", err == nil && !fi.IsDir()
}
