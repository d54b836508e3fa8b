// Package idmap holds what the backends that run calls in user
// namespaces share: a user namespace made only to carry id maps, and
// id-mapped mounts through it (a file owned on disk by container id k is
// seen as owned by the host id k maps to), which stage the binds of a
// call running as container root; and the decision which calls get a
// user namespace and which of their binds are staged that way.
//
// It also owns bind staging as such, id-mapped or not (stage.go): the
// one stager every backend that stages binds uses (StageAt: oci,
// containerd and docker), their undo (Unstage, RemoveCallDir) and the
// walk of an instance's per-call staging directories that Reap removes
// (RemoveCallDirs). The backends import it; it imports policy and
// sandbox.
package idmap

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// NewUserNamespace returns an open file of a new user namespace with the
// given uid and gid maps, which no process is left in: it creates a child
// in that namespace (os.ForkExec of this binary, traced so that it stops
// at its exec and never runs a line of it), opens /proc/<pid>/ns/user,
// kills and reaps the child. The file keeps the namespace alive until it
// is closed. The caller must be root.
func NewUserNamespace(uids, gids []specs.LinuxIDMapping) (*os.File, error) {
	// The tracer of the child is the thread that forked it: stay on it
	// until the child is reaped.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	attr := &syscall.ProcAttr{
		Env: []string{},
		Sys: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: sysIDMap(uids),
			GidMappings: sysIDMap(gids),
			Ptrace:      true,
			Pdeathsig:   syscall.SIGKILL,
		},
	}
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"dsh-sandbox-userns"}, attr)
	if err != nil {
		return nil, fmt.Errorf("user namespace: create: %w", err)
	}
	f, oerr := os.Open("/proc/" + strconv.Itoa(pid) + "/ns/user")
	_ = unix.Kill(pid, unix.SIGKILL)
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil || ws.Exited() || ws.Signaled() {
			break
		}
	}
	if oerr != nil {
		return nil, fmt.Errorf("user namespace: %w", oerr)
	}
	return f, nil
}

func sysIDMap(m []specs.LinuxIDMapping) []syscall.SysProcIDMap {
	out := make([]syscall.SysProcIDMap, len(m))
	for i, e := range m {
		out[i] = syscall.SysProcIDMap{ContainerID: int(e.ContainerID), HostID: int(e.HostID), Size: int(e.Size)}
	}
	return out
}

// IDs is how a call's identity is mapped to the host.
type IDs struct {
	// Enabled: the call gets a user namespace with Mapping.
	Enabled bool
	Mapping policy.IDMapping
	// Idmapped: the workspace, the session directory and the policy's
	// bind mounts are staged as id-mapped mounts (the call runs as
	// container uid 0, a mapped unprivileged host uid, and reads and
	// writes them as on-disk uid 0).
	Idmapped bool
	// HostUID is the host uid the call's processes have.
	HostUID uint32
	// DiskUID is the uid the call's file accesses are checked against on
	// the binds of the call: HostUID, or the container uid (0) when the
	// binds are id-mapped. prepare.Paths grants it read on the session
	// directory.
	DiskUID uint32
	// RootUID and RootGID are the host ids of the container's root.
	RootUID, RootGID uint32
}

// ForCall decides the user namespace of a call of policy p running as
// container uid:gid on a runtime that can run one: always, unless the
// policy says user: host-root. backend prefixes errors.
func ForCall(backend string, p sandbox.Policy, uid, gid uint32) (IDs, error) {
	if policy.HostRoot(p) {
		return IDs{HostUID: uid, DiskUID: uid}, nil
	}
	m, err := policy.CallIDMapping(uid, gid)
	if err != nil {
		return IDs{}, err
	}
	host, ok := policy.HostID(m.UIDs, uid)
	if !ok || host == 0 {
		return IDs{}, sandbox.Errorf(sandbox.ErrInternal, "%s: user %d:%d: no unprivileged host uid in the map", backend, uid, gid)
	}
	rootUID, _ := policy.HostID(m.UIDs, 0)
	rootGID, _ := policy.HostID(m.GIDs, 0)
	c := IDs{Enabled: true, Mapping: m, Idmapped: uid == 0, HostUID: host, DiskUID: host, RootUID: rootUID, RootGID: rootGID}
	if c.Idmapped {
		c.DiskUID = uid
	}
	return c, nil
}

// Staging says how Stage stages the binds of a call.
type Staging struct {
	// Mapped are the destinations of the binds id-mapped with the spec's
	// id maps: the workspace, the session directory and the policy's
	// mounts of a call running as container uid 0 (Dests).
	Mapped map[string]bool
	// Session is the destination of the session directory ("" when the
	// call does not mount it). Its bind is id-mapped so that the
	// directory's owner on disk, the harness user, is the call's own host
	// identity (SessionMaps): the call reads the transcript and spill
	// files as their owner whatever their modes give others, through a
	// mount that is read-only. It takes precedence over Mapped.
	Session string
}

// StagingFor is the Staging of req's call with user namespace ids: the
// session directory's bind always, the other binds when ids.Idmapped.
func StagingFor(req *sandbox.Request, ids IDs) Staging {
	var st Staging
	if ids.Idmapped {
		st.Mapped = Dests(req)
	}
	if m, ok := sandbox.NewPlan(req.Policy, req.Session, sandbox.Identity{}).Mount(sandbox.MountTranscript); ok {
		st.Session = m.Target
	}
	return st
}

// Dests are the destinations of the binds an id-mapped call stages: the
// workspace, the session directory and the policy's mounts. Through
// them the call (container uid 0, host uid policy.MappedIDBase) has the
// on-disk identity uid 0, exactly the permissions a call running as host
// uid 0 without capabilities had, and nothing more. They are the binds
// of the call's plan (sandbox.NewPlan, which policy.Plan checked when the
// spec was made).
func Dests(req *sandbox.Request) map[string]bool {
	d := map[string]bool{}
	for _, m := range sandbox.NewPlan(req.Policy, req.Session, sandbox.Identity{}).Binds() {
		d[m.Target] = true
	}
	return d
}

// Stage replaces the source of every bind mount in spec by a staging
// mount of that source attached at a new entry of dir (an existing empty
// directory that no call can write): a clone of what StageAt opens
// without following any link, so the runtime, which mounts a source by
// its path and follows links there, mounts what prepare.Paths
// checked and never a link a call swapped in since. Each staging mount
// is nosuid and nodev, and read-only and noexec where the bind's options
// say so. The binds whose destination is in how.Mapped are id-mapped
// with the spec's id maps; the session directory's (how.Session) is
// id-mapped with SessionMaps; a bind keeps the mapping. in runs each
// mount operation (in the mount namespace the runtime sees). The staging
// mount points made are returned, also with an error: the caller
// unmounts and removes them.
func Stage(spec *specs.Spec, how Staging, dir string, in func(func() error) error) (staged []string, err error) {
	usernsFD := -1
	if len(how.Mapped) > 0 {
		l := spec.Linux
		if l == nil || len(l.UIDMappings) == 0 || len(l.GIDMappings) == 0 {
			return nil, fmt.Errorf("id-mapped mounts: the spec has no user namespace mappings")
		}
		ns, release, err := namespaceFor(l.UIDMappings, l.GIDMappings)
		if err != nil {
			return nil, err
		}
		defer release()
		usernsFD = int(ns.Fd())
	}
	for i := range spec.Mounts {
		m := &spec.Mounts[i]
		if m.Type != "bind" {
			continue
		}
		var attrs uint64
		if slices.Contains(m.Options, "ro") {
			attrs |= unix.MOUNT_ATTR_RDONLY
		}
		if slices.Contains(m.Options, "noexec") {
			attrs |= unix.MOUNT_ATTR_NOEXEC
		}
		target := filepath.Join(dir, strconv.Itoa(len(staged)))
		source := m.Source
		dest := filepath.Clean(m.Destination)
		var stage func() error
		switch {
		case how.Session != "" && dest == filepath.Clean(how.Session):
			uid, gid, err := CallHostIDs(spec)
			if err != nil {
				return staged, fmt.Errorf("bind mount %s: %w", m.Destination, err)
			}
			stage = func() error { return StageSession(source, target, uid, gid, attrs) }
		case how.Mapped[dest]:
			stage = func() error { return StageAt(source, target, usernsFD, attrs) }
		default:
			stage = func() error { return StageAt(source, target, -1, attrs) }
		}
		if err := in(stage); err != nil {
			return staged, fmt.Errorf("bind mount %s: %w", m.Destination, err)
		}
		staged = append(staged, target)
		m.Source = target
	}
	return staged, nil
}

// MountPoints creates, in the root file system at rootDir, the mount
// point of every mount that does not lie inside another mount (tmpfs
// excepted): a directory, or an empty file for a bind of a file. Paths
// are created below rootDir only (os.Root). A runtime in a user
// namespace cannot create them in an image its mapped root does not own.
func MountPoints(rootDir string, mounts []specs.Mount) error {
	root, err := os.OpenRoot(rootDir)
	if err != nil {
		return fmt.Errorf("rootfs skeleton: %w", err)
	}
	defer root.Close()
	dests := make(map[string]bool, len(mounts))
	for _, m := range mounts {
		dests[filepath.Clean(m.Destination)] = true
	}
	for _, m := range mounts {
		d := filepath.Clean(m.Destination)
		if d == "/" || !filepath.IsAbs(d) || m.Type == "tmpfs" {
			// A tmpfs gets the mode of an existing mount point
			// from runc instead of its own mode= option; the
			// runtimes create missing ones themselves.
			continue
		}
		parent := filepath.Dir(d)
		if parent != "/" && mountInside(parent, dests) {
			continue // the runtime creates it inside that mount
		}
		rel := strings.TrimPrefix(d, "/")
		if _, err := root.Lstat(rel); err == nil {
			continue
		}
		file := false
		if m.Type == "bind" {
			if fi, err := os.Stat(m.Source); err == nil && !fi.IsDir() {
				file = true
			}
		}
		if err := root.MkdirAll(filepath.Dir(rel), 0o755); err != nil {
			return fmt.Errorf("mount point %s: %w", d, err)
		}
		if file {
			f, err := root.OpenFile(rel, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return fmt.Errorf("mount point %s: %w", d, err)
			}
			f.Close()
			continue
		}
		if err := root.Mkdir(rel, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("mount point %s: %w", d, err)
		}
	}
	return nil
}

// mountInside reports whether p is at or below one of the destinations.
func mountInside(p string, dests map[string]bool) bool {
	for q := path.Clean(p); ; q = path.Dir(q) {
		if dests[q] {
			return true
		}
		if q == "/" {
			return false
		}
	}
}

// Searchable checks that others may search every ancestor of stateDir:
// the unprivileged host uid a user namespace maps the container's root
// to walks through them to a call's rootfs, which runc and crun mount
// from inside the namespace (the executors make stateDir and the
// directories below it on that path 0711 themselves). One that is not is
// an error naming it; the service does not change modes of directories
// it does not own.
func Searchable(stateDir string) error {
	for d := filepath.Dir(stateDir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err != nil {
			return err
		}
		if fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s (an ancestor of %s) is mode %04o: calls run in user namespaces, whose mapped root must search it; make it searchable by others (chmod o+x %s) or choose another state directory", d, stateDir, fi.Mode().Perm(), d)
		}
		if d == "/" {
			return nil
		}
	}
}
