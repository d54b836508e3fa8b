package reap

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/hostpath"
)

// Executors that share a state directory tell live instances from dead
// ones by lock files: an executor holds an exclusive flock on
// <dir>/<instance>.lock for its whole life, the kernel drops it when the
// process dies, and Reap treats an instance whose lock file exists but is
// not held as dead.

// LockInstance creates dir (0700) and dir/<instance>.lock, takes an
// exclusive lock on it and writes this process's PID into it. The file is
// close-on-exec, so no runtime or container inherits the lock. An
// instance whose lock a live executor holds is an ErrInvalid error.
func LockInstance(dir, instance string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "instance lock: %v", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, instance+".lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "instance lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "InstanceID %q is in use by a live executor", instance)
		}
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "instance lock %q: %v", instance, err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "instance lock %q: %v", instance, err)
	}
	if _, err := fmt.Fprintf(f, "%d\n", os.Getpid()); err != nil {
		f.Close()
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "instance lock %q: %v", instance, err)
	}
	return f, nil
}

// LockDeadInstances takes the lock of every instance in dir other than
// self whose lock file is not held, so that none of them can come back
// while the caller reaps; it returns their open lock files by instance.
// release drops those locks (the caller removes the files it is done
// with first). A missing dir is no error: no instance ever ran there.
func LockDeadInstances(dir, self string) (dead map[string]*os.File, release func(), err error) {
	dead = map[string]*os.File{}
	release = func() {
		for _, f := range dead {
			f.Close()
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return dead, release, nil
		}
		return dead, release, err
	}
	for _, ent := range entries {
		inst, ok := strings.CutSuffix(ent.Name(), ".lock")
		if !ok || inst == self {
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, ent.Name()), os.O_RDWR, 0)
		if err != nil {
			continue
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			f.Close()
			continue // held: a live instance
		}
		dead[inst] = f
	}
	return dead, release, nil
}

// InstanceKnown reports whether instance has a lock file in dir: it ran
// on this state directory, and is live unless LockDeadInstances took its
// lock.
func InstanceKnown(dir, instance string) bool {
	_, err := os.Stat(filepath.Join(dir, instance+".lock"))
	return err == nil
}

// ActiveCalls is the set of call IDs whose container an executor's Run
// still owns, so that its Reap leaves them alone. The zero value is an
// empty set, safe for concurrent use.
type ActiveCalls struct {
	mu  sync.Mutex
	ids map[string]struct{}
}

// Add records id; it reports false when id is already active.
func (a *ActiveCalls) Add(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, dup := a.ids[id]; dup {
		return false
	}
	if a.ids == nil {
		a.ids = map[string]struct{}{}
	}
	a.ids[id] = struct{}{}
	return true
}

// Remove forgets id.
func (a *ActiveCalls) Remove(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.ids, id)
}

// Has reports whether id is active.
func (a *ActiveCalls) Has(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.ids[id]
	return ok
}

// ForeignLeftoverGrace is how long a stopped container of an instance
// unknown on this state directory (a service on another state directory,
// or one long gone) must have been idle before a reaper removes it: a
// live executor elsewhere creates its container before it starts it and
// inspects it after it exits, and neither state may be taken for a
// leftover. Dead instances known here are reaped at once.
const ForeignLeftoverGrace = 2 * time.Minute

// IdleLongEnough reports whether a stopped foreign container, created at
// created and finished at finished (zero when it never ran), has been
// idle for grace (normally ForeignLeftoverGrace) at now.
func IdleLongEnough(now, created, finished time.Time, grace time.Duration) bool {
	last := created
	if finished.After(last) {
		last = finished
	}
	return now.Sub(last) >= grace
}

// NewInstanceID returns a random executor instance id, "i-" and 12 hex
// digits. It is safe for concurrent use.
func NewInstanceID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b) // never fails; see crypto/rand.Read
	return "i-" + hex.EncodeToString(b)
}

// CheckExecutorIdentity checks and completes the settings that name a
// backend's executor: stateDir must be absolute (it is returned cleaned);
// an empty instance becomes NewInstanceID(), any other must be 1–64
// characters of [A-Za-z0-9_.-] starting with a letter or digit. Errors
// wrap ErrInvalid and start with backend.
func CheckExecutorIdentity(backend, stateDir, instance string) (string, string, error) {
	if stateDir == "" || !filepath.IsAbs(stateDir) {
		return "", "", sandbox.Errorf(sandbox.ErrInvalid, "%s: StateDir %q is not an absolute path", backend, stateDir)
	}
	if instance == "" {
		instance = NewInstanceID()
	} else if !sandbox.ValidCallID(instance) {
		return "", "", sandbox.Errorf(sandbox.ErrInvalid, "%s: InstanceID %q is not 1–64 characters of [A-Za-z0-9_.-] starting with a letter or digit", backend, instance)
	}
	return hostpath.Real(stateDir), instance, nil
}
