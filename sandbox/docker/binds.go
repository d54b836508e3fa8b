package docker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/mount"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/idmap"
)

// The engine's API has no nosuid, nodev or noexec for a bind mount, and
// the runtime's read-only remount of a bind (runc 1.1: MS_REMOUNT|MS_BIND|
// MS_RDONLY) clears those flags even when the source mount has them; a
// read-write bind is not remounted and keeps the source mount's flags
// (measured with runc 1.1.5 under Docker 20.10: /proc/self/mountinfo
// inside shows "rw,nosuid,nodev,noexec" for a read-write bind of a
// nosuid,nodev,noexec mount, and only "ro" for a read-only one). So every
// bind of a call is staged: the source is bind-mounted (not recursively)
// at a directory of ours, that mount is remounted with
// exactly the flags the policy asks for (nosuid and nodev always, noexec
// and ro where the policy says so), the flags are read back, and the
// engine binds the staging mount read-write, which the runtime leaves
// alone: the container's mount inherits every flag, read-only included,
// and without capabilities the call cannot remount it.

// bindsDir holds the staging mounts of every instance on StateDir:
// <StateDir>/docker-binds/<instance>/<call>/<n>.
func (e *Executor) bindsDir() string { return filepath.Join(e.opts.StateDir, "docker-binds") }

// callBindsDir is where the staging mounts of one call go.
func (e *Executor) callBindsDir(callID string) string {
	return filepath.Join(e.bindsDir(), e.instance, callID)
}

// engineMounts maps the call's mounts ms (policy.SpecMounts of its plan:
// tmpfs and binds, parents first) onto the engine's host configuration:
//   - a tmpfs keeps the plan's options plus "rw" and "exec" (the engine
//     adds noexec otherwise) and an explicit uid/gid (0) where the plan
//     gives the tmpfs no owner (/tmp);
//   - a bind comes from its staging mount (binds, one per bind of ms, in
//     order; see stageBinds), non-recursive and private, and read-write
//     at the engine: read-only, nosuid, nodev and noexec come with the
//     staging mount, since a read-only bind would be remounted by the
//     runtime, which drops the other flags.
//
// A bind that was not staged is an internal error, a mount of another
// type an invalid one.
func engineMounts(callID string, ms []specs.Mount, binds []stagedBind) (map[string]string, []mount.Mount, error) {
	tmpfs := map[string]string{}
	var out []mount.Mount
	for _, m := range ms {
		switch m.Type {
		case "tmpfs":
			opts := append([]string{"rw", "exec"}, m.Options...)
			if !slices.ContainsFunc(opts, func(o string) bool { return strings.HasPrefix(o, "uid=") }) {
				opts = append(opts, "uid=0", "gid=0")
			}
			tmpfs[m.Destination] = strings.Join(opts, ",")
		case "bind":
			if len(binds) == 0 || binds[0].Target != m.Destination {
				return nil, nil, sandbox.Errorf(sandbox.ErrInternal, "docker: call %s: mount %q was not staged", callID, m.Destination)
			}
			b := binds[0]
			binds = binds[1:]
			out = append(out, mount.Mount{
				Type:     mount.TypeBind,
				Source:   b.Source,
				Target:   b.Target,
				ReadOnly: false,
				BindOptions: &mount.BindOptions{
					Propagation:  mount.PropagationRPrivate,
					NonRecursive: true,
				},
			})
		default:
			return nil, nil, sandbox.Errorf(sandbox.ErrInvalid, "docker: call %s: mount %q of type %q is not supported", callID, m.Destination, m.Type)
		}
	}
	return tmpfs, out, nil
}

// stageFlags are the flags of the staging mount of bind m: MS_NOSUID and
// MS_NODEV always, MS_NOEXEC and MS_RDONLY when m says noexec and ro.
func stageFlags(m specs.Mount) uintptr {
	flags := uintptr(unix.MS_NOSUID | unix.MS_NODEV)
	if slices.Contains(m.Options, "noexec") {
		flags |= unix.MS_NOEXEC
	}
	if slices.Contains(m.Options, "ro") {
		flags |= unix.MS_RDONLY
	}
	return flags
}

// stagedBind is one staged bind mount: what the engine binds into the
// container.
type stagedBind struct {
	// Source is the staging mount on the host.
	Source string
	// Target is the path inside the container.
	Target string
}

// stageBinds stages every bind mount of ms (the policy's mounts; others
// are ignored) below the call's directory and returns them in order. With
// usernsFD ≥ 0 (an open user namespace, see idmap.NewUserNamespace) each
// staging mount is id-mapped with that namespace's maps (userns.go);
// with -1 it is a plain bind. The session directory's bind (sess.Dest)
// is id-mapped so that its owner is the call (idmap.StageSession). On
// failure it removes what it staged.
// release removes the staging mounts and their directories; it is safe
// to call once the container is gone (a mount the container still holds
// is detached lazily).
func (e *Executor) stageBinds(callID string, ms []specs.Mount, usernsFD int, sess sessionBind) (_ []stagedBind, release func() error, err error) {
	dir := e.callBindsDir(callID)
	var staged []string
	rel := func() error {
		var errs []error
		for i := len(staged) - 1; i >= 0; i-- {
			errs = append(errs, unstage(staged[i]))
		}
		staged = nil
		if err := removeEmpty(dir); err != nil {
			errs = append(errs, err)
		}
		_ = os.Remove(filepath.Dir(dir)) // the instance's directory, when empty
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, rel())
		}
	}()
	var out []stagedBind
	for _, m := range ms {
		if m.Type != "bind" {
			continue
		}
		if len(out) == 0 {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return nil, nil, fmt.Errorf("staging directory: %w", err)
			}
		}
		p := filepath.Join(dir, strconv.Itoa(len(out)))
		if sess.Dest != "" && filepath.Clean(m.Destination) == sess.Dest {
			if err := idmap.StageSession(m.Source, p, sess.UID, sess.GID, mountAttrs(stageFlags(m))); err != nil {
				return nil, nil, fmt.Errorf("mount %q (source %q): %w", m.Destination, m.Source, err)
			}
			staged = append(staged, p)
			out = append(out, stagedBind{Source: p, Target: m.Destination})
			continue
		}
		if err := stage(m.Source, p, stageFlags(m), usernsFD, &staged); err != nil {
			return nil, nil, fmt.Errorf("mount %q (source %q): %w", m.Destination, m.Source, err)
		}
		out = append(out, stagedBind{Source: p, Target: m.Destination})
	}
	return out, rel, nil
}

// stage bind-mounts source at p (created as an empty directory or file,
// like source) and remounts it with flags (MS_NOSUID, MS_NODEV, MS_NOEXEC,
// MS_RDONLY), recording p in staged as soon as it exists; with usernsFD
// ≥ 0 the mount is an id-mapped clone with those flags instead
// (idmap.MountFD). No component of source may be a symbolic link.
func stage(source, p string, flags uintptr, usernsFD int, staged *[]string) error {
	fd, err := unix.Openat2(unix.AT_FDCWD, source, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return fmt.Errorf("open: %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat: %w", err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		err = os.Mkdir(p, 0o700)
	case unix.S_IFREG:
		var f *os.File
		if f, err = os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600); err == nil {
			err = f.Close()
		}
	case unix.S_IFLNK:
		return errors.New("is a symbolic link")
	default:
		return errors.New("is neither a directory nor a regular file")
	}
	if err != nil {
		return fmt.Errorf("staging point: %w", err)
	}
	*staged = append(*staged, p)
	if usernsFD >= 0 {
		// The clone of the mount tree at the descriptor: what was
		// opened, never a link swapped in later.
		if err := idmap.MountFD(fd, p, usernsFD, mountAttrs(flags)); err != nil {
			return fmt.Errorf("id-mapped mount: %w", err)
		}
		return checkFlags(p, flags)
	}
	// The descriptor pins what was opened: a link swapped in for source
	// after the open is not followed.
	if err := unix.Mount("/proc/self/fd/"+strconv.Itoa(fd), p, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind: %w", err)
	}
	// The mount keeps the propagation its parent gives it: where that is
	// shared (systemd makes / shared), copies appear in the peer and
	// slave namespaces, and the unmount of unstage must reach them too,
	// which it does only while the mount stays in its peer group. The
	// flags below are per mount and do not propagate; the engine binds
	// the staging mount privately into the container.
	if err := unix.Mount("", p, "", unix.MS_REMOUNT|unix.MS_BIND|flags, ""); err != nil {
		return fmt.Errorf("remount with nosuid,nodev: %w", err)
	}
	return checkFlags(p, flags)
}

// mountAttrs are the MOUNT_ATTR_* attributes of the MS_* flags stage
// uses.
func mountAttrs(flags uintptr) uint64 {
	var a uint64
	for ms, attr := range map[uintptr]uint64{
		unix.MS_NOSUID: unix.MOUNT_ATTR_NOSUID, unix.MS_NODEV: unix.MOUNT_ATTR_NODEV,
		unix.MS_NOEXEC: unix.MOUNT_ATTR_NOEXEC, unix.MS_RDONLY: unix.MOUNT_ATTR_RDONLY,
	} {
		if flags&ms != 0 {
			a |= attr
		}
	}
	return a
}

// checkFlags fails unless the mount at p has every flag of want (MS_*
// flags; statfs reports them as ST_* with the same values).
func checkFlags(p string, want uintptr) error {
	var sfs unix.Statfs_t
	if err := unix.Statfs(p, &sfs); err != nil {
		return fmt.Errorf("statfs: %w", err)
	}
	have := uintptr(sfs.Flags)
	if missing := want &^ have; missing != 0 {
		return fmt.Errorf("the staging mount lacks flags %#x after the remount (has %#x)", missing, have)
	}
	return nil
}

// unstage unmounts the staging mount p (lazily: the engine may still be
// letting go of it) and removes its mount point. A p that is not a mount
// point is only removed; one that cannot be unmounted stays, and so does
// what it shows (os.Remove never deletes a directory's contents).
func unstage(p string) error {
	if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("staging mount %s: unmount: %w", p, err)
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("staging mount %s: %w", p, err)
	}
	return nil
}

// removeEmpty removes dir when it exists and is empty.
func removeEmpty(dir string) error {
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("staging directory %s: %w", dir, err)
	}
	return nil
}

// reapBinds removes the staging mounts of instance inst below bindsDir,
// except those of the calls skip reports true for, and returns the
// staging points it removed.
func (e *Executor) reapBinds(inst string, skip func(callID string) bool) ([]string, error) {
	idir := filepath.Join(e.bindsDir(), inst)
	calls, err := os.ReadDir(idir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, c := range calls {
		if !c.IsDir() || skip(c.Name()) {
			continue
		}
		cdir := filepath.Join(idir, c.Name())
		points, err := os.ReadDir(cdir)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, p := range points {
			pp := filepath.Join(cdir, p.Name())
			if err := unstage(pp); err != nil {
				errs = append(errs, err)
				continue
			}
			removed = append(removed, pp)
		}
		if err := removeEmpty(cdir); err != nil {
			errs = append(errs, err)
		}
	}
	_ = os.Remove(idir)
	return removed, errors.Join(errs...)
}
