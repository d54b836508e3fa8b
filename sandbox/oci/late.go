package oci

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/idmap"
)

// The session directory of a pooled call is mounted late: a slot is
// prepared without it, for every session of the same workspace, policy
// and identity, and Bind attaches the bound call's session directory —
// the same read-only, nosuid, nodev, noexec, id-mapped clone the cold
// path stages — in the container's mount namespace before the command
// starts. A new session's first call then finds a prepared container
// too. A call whose session directory would lie inside a bind mount of
// its plan (the workspace, a policy mount) or inside a kernel file
// system is keyed with its session directory instead: its slot is made
// for it alone, as before.

// systemDirs are where a session directory is never mounted at Bind:
// kernel file systems, and the host image's read-only binds of the
// host's system directories.
var systemDirs = []string{"/proc", "/sys", "/dev", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// lateTranscript reports whether req's session directory can be mounted
// at Bind: the plan mounts it, at a path inside no bind mount of the plan
// and below no system directory, with no other mount inside it, and the
// call's identity (uid:gid, resolved by the caller) does not depend on it.
func lateTranscript(req *sandbox.Request, uid, gid uint32) bool {
	pl := sandbox.NewPlan(req.Policy, req.Session, sandbox.Identity{})
	td, ok := pl.Mount(sandbox.MountTranscript)
	if !ok {
		return false
	}
	for _, sys := range systemDirs {
		if within(td.Target, sys) {
			return false
		}
	}
	for _, m := range pl.Mounts {
		if m.Kind == sandbox.MountTranscript {
			continue
		}
		if within(m.Target, td.Target) || (m.Bind() && within(td.Target, m.Target)) {
			return false
		}
	}
	tuid, tgid, err := policy.ResolveUser(req.Policy, withoutTranscript(req).Session)
	return err == nil && uid == tuid && gid == tgid
}

// within reports whether p is dir or below it.
func within(p, dir string) bool {
	p, dir = filepath.Clean(p), filepath.Clean(dir)
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

// withoutTranscript is req for a slot whose session directory is mounted
// at Bind: no session id (the slot serves any session) and no session
// directory.
func withoutTranscript(req *sandbox.Request) *sandbox.Request {
	t := *req
	t.Session.ID, t.Session.TranscriptDir = "", ""
	return &t
}

// attachTranscript mounts call's session directory, when its plan has
// one, in the container of s (prepared without one, see
// withoutTranscript), before the call is sent to the stub.
func (s *slot) attachTranscript(req *sandbox.Request) error {
	td, ok := sandbox.NewPlan(req.Policy, req.Session, sandbox.Identity{}).Mount(sandbox.MountTranscript)
	if !ok {
		return nil
	}
	if s.b.hostIDsErr != nil {
		return s.b.hostIDsErr
	}
	var attrs uint64
	if td.NoExec {
		attrs |= unix.MOUNT_ATTR_NOEXEC
	}
	tfd, _, err := idmap.SessionClone(td.Source, s.b.hostUID, s.b.hostGID, attrs)
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	// The mount point: made in the root file system's skeleton when the
	// directory lies there (the container sees that root read-only),
	// else inside the container's tmpfs, below.
	point := specs.Mount{Destination: td.Target, Type: "bind", Source: td.Source}
	if err := s.b.inNamespace(func() error { return s.b.mountPoints(append(s.b.mounts, point)) }); err != nil {
		return err
	}
	pid, err := s.containerPid()
	if err != nil {
		return err
	}
	return inMountNamespace(pid, func() error {
		// A directory made in the container's tmpfs must belong to an id
		// of its user namespace (EOVERFLOW otherwise): the container's
		// root. This thread alone changes ids; it is discarded after.
		if err := unix.Setfsgid(int(s.b.rootGID)); err != nil {
			return fmt.Errorf("setfsgid: %w", err)
		}
		if err := unix.Setfsuid(int(s.b.rootUID)); err != nil {
			return fmt.Errorf("setfsuid: %w", err)
		}
		dfd, err := mkdirNoFollow(td.Target)
		if err != nil {
			return err
		}
		defer unix.Close(dfd)
		if err := unix.MoveMount(tfd, "", dfd, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
			return fmt.Errorf("move_mount to %s: %w", td.Target, err)
		}
		return nil
	})
}

// containerPid is the host pid of the container's first process, the
// stub. The runtime writes it to the pid file after the container's
// process runs, so it may lag the stub's Ready report by a little: it is
// waited for, up to pidFileWait, while the runtime runs.
func (s *slot) containerPid() (int, error) {
	deadline := time.Now().Add(pidFileWait)
	for {
		data, err := os.ReadFile(s.pidFile)
		if err == nil {
			// crun creates the file before it writes the pid (one
			// write of a few bytes): an empty file is one not written
			// yet.
			var pid int
			if _, serr := fmt.Sscan(string(data), &pid); serr == nil && pid > 0 {
				return pid, nil
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("the container's pid file holds %q", data)
			}
		} else if !errors.Is(err, os.ErrNotExist) || time.Now().After(deadline) {
			return 0, fmt.Errorf("the container's pid: %w", err)
		}
		select {
		case <-s.done:
			return 0, fmt.Errorf("the container's runtime exited")
		case <-time.After(time.Millisecond):
		}
	}
}

// pidFileWait bounds containerPid's wait for the runtime's pid file.
const pidFileWait = 5 * time.Second

// inMountNamespace runs f on an OS thread of its own that has joined the
// mount namespace of process pid; the thread is discarded afterwards.
func inMountNamespace(pid int, f func() error) error {
	nsf, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		return fmt.Errorf("the container's mount namespace: %w", err)
	}
	defer nsf.Close()
	errc := make(chan error, 1)
	var join func()
	join = func() {
		// Never unlocked: when this goroutine returns, the runtime ends
		// the thread, and the namespace it joined goes with it.
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The main thread is never ended: hand over to a goroutine
			// that cannot run here while this one holds it.
			done := make(chan struct{})
			go func() {
				join()
				close(done)
			}()
			<-done
			runtime.UnlockOSThread()
			return
		}
		// A thread shares its file system context (root, cwd) with the
		// process; setns of a mount namespace needs its own.
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- fmt.Errorf("unshare CLONE_FS: %w", err)
			return
		}
		if err := unix.Setns(int(nsf.Fd()), unix.CLONE_NEWNS); err != nil {
			errc <- fmt.Errorf("join the container's mount namespace: %w", err)
			return
		}
		errc <- f()
	}
	go join()
	return <-errc
}

// mkdirNoFollow opens the directory at the absolute path p (O_PATH),
// creating what is missing of it (0755), without following any link: in
// a container's mount namespace, whose tmpfs the container may have
// written, a link never leads the mount elsewhere.
func mkdirNoFollow(p string) (int, error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	for _, name := range strings.Split(strings.Trim(filepath.Clean(p), "/"), "/") {
		if name == "" {
			continue
		}
		next, err := openNoFollow(fd, name)
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(fd, name, 0o755); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = openNoFollow(fd, name)
			}
		}
		unix.Close(fd)
		if err != nil {
			return -1, fmt.Errorf("mount point %s: %s: %w", p, name, err)
		}
		fd = next
	}
	return fd, nil
}

func openNoFollow(dir int, name string) (int, error) {
	return unix.Openat2(dir, name, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_BENEATH,
	})
}
