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
// bind of a call is staged (idmap.StageAt, the stager every backend
// uses): a non-recursive clone of the source is attached at a directory
// of ours with exactly the flags the policy asks for (nosuid and nodev
// always, noexec and ro where the policy says so), the flags are read
// back, and the engine binds the staging mount read-write, which the
// runtime leaves alone: the container's mount inherits every flag,
// read-only included, and without capabilities the call cannot remount
// it. The staging mount keeps the propagation its parent gives it: where
// that is shared (systemd makes / shared), copies appear in the peer and
// slave namespaces (the engine's), and its unmount (idmap.Unstage)
// reaches them too. The flags are per mount and do not propagate; the
// engine binds the staging mount privately into the container.

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
// are ignored) below the call's directory with idmap.StageAt and returns
// them in order. With usernsFD ≥ 0 (an open user namespace, see
// idmap.NewUserNamespace) each staging mount is id-mapped with that
// namespace's maps (userns.go); with -1 it is a plain bind. The session
// directory's bind (sess.Dest) is id-mapped so that its owner is the call
// (idmap.StageSession). On failure it removes what it staged.
// release removes the staging mounts and their directories; it is safe
// to call once the container is gone (a mount the container still holds
// is detached lazily).
func (e *Executor) stageBinds(callID string, ms []specs.Mount, usernsFD int, sess sessionBind) (_ []stagedBind, release func() error, err error) {
	dir := e.callBindsDir(callID)
	var staged []string
	rel := func() error {
		_, err := idmap.RemoveCallDir(dir, staged)
		staged = nil
		_ = os.Remove(filepath.Dir(dir)) // the instance's directory, when empty
		return err
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
		stage := idmap.StageAt
		if sess.Dest != "" && filepath.Clean(m.Destination) == sess.Dest {
			stage = func(source, target string, _ int, attrs uint64) error {
				return idmap.StageSession(source, target, sess.UID, sess.GID, attrs)
			}
		}
		if err := stage(m.Source, p, usernsFD, mountAttrs(stageFlags(m))); err != nil {
			return nil, nil, fmt.Errorf("mount %q (source %q): %w", m.Destination, m.Source, err)
		}
		staged = append(staged, p)
		out = append(out, stagedBind{Source: p, Target: m.Destination})
	}
	return out, rel, nil
}

// mountAttrs are the MOUNT_ATTR_* attributes of the MS_* flags of
// stageFlags.
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

// reapBinds removes the staging mounts of instance inst below bindsDir
// (idmap.RemoveCallDirs; the directory of a dead instance goes too),
// except those of the calls keep reports true for, and returns the
// staging points it removed.
func (e *Executor) reapBinds(inst string, keep func(callID string) bool) ([]string, error) {
	_, points, err := idmap.RemoveCallDirs(filepath.Join(e.bindsDir(), inst), inst != e.instance, keep)
	return points, err
}
