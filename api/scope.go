package api

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/hostpath"
)

// MaxSessions bounds the sessions the service remembers the owner of;
// beyond it new sessions get 429 until the service restarts.
const MaxSessions = 1 << 20

// checkDir decides whether client cl may use dir as the directory named
// by field (session.cwd, cwd, workdir) and returns its resolved form. The
// directory must resolve without symbolic links, must not be a system
// directory, must lie inside the service's workspace roots (when set)
// and the client's own (when it has some), must be owned by a socket
// peer that is not root, and must neither contain nor lie inside a path
// the service protects. A missing directory is 400; every other refusal
// is 403 naming field.
func (s *Server) checkDir(cl Client, field, dir string) (string, error) {
	resolved, err := hostpath.ResolveDir(field, dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fieldErrorf(field, "%s does not exist", dir)
		}
		if !filepath.IsAbs(dir) {
			// A header may carry a Windows cwd (session.IsAbsCwd); it names
			// no directory here.
			return "", fieldErrorf(field, "%s is not an absolute path on this machine", dir)
		}
		return "", forbiddenf(field, "%s: %v", dir, err)
	}
	if hostpath.SystemDir(resolved) {
		return "", forbiddenf(field, "%s is a system directory", resolved)
	}
	if roots := s.opts.WorkspaceRoots; len(roots) > 0 && !within(resolved, roots) {
		return "", forbiddenf(field, "%s is outside the service's workspace roots", resolved)
	}
	if len(cl.Roots) > 0 && !within(resolved, cl.Roots) {
		return "", forbiddenf(field, "%s is outside the workspace roots of client %q", resolved, cl.Name)
	}
	if cl.Kind == ClientSocket && cl.UID != 0 {
		fi, err := os.Lstat(resolved)
		if err != nil {
			return "", forbiddenf(field, "%s: %v", resolved, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || int(st.Uid) != cl.UID {
			return "", forbiddenf(field, "%s is not owned by the client's uid %d", resolved, cl.UID)
		}
	}
	if err := hostpath.CheckDeployment(resolved, s.opts.ProtectedPaths); err != nil {
		return "", forbiddenf(field, "%v", err)
	}
	return resolved, nil
}

func within(path string, roots []string) bool {
	for _, r := range roots {
		if hostpath.Within(path, r) {
			return true
		}
	}
	return false
}

// sessionOwners remembers which client first used each session id. It
// is safe for concurrent use.
type sessionOwners struct {
	mu    sync.Mutex
	owner map[string]string // session id → Client.Key
}

// claim makes key the owner of session id when nobody owns it yet, and
// reports a not-found error when another client does (404, so that a
// session's existence is not revealed). The empty id (no agent) belongs
// to nobody.
func (o *sessionOwners) claim(id, key string) error {
	if id == "" {
		return nil
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch cur, ok := o.owner[id]; {
	case ok && cur == key:
		return nil
	case ok:
		return sandbox.Errorf(sandbox.ErrNotFound, "session %q not found", id)
	case len(o.owner) >= MaxSessions:
		return sandbox.Errorf(types.ErrOverloaded, "the service knows %d sessions, its limit", MaxSessions)
	}
	if o.owner == nil {
		o.owner = map[string]string{}
	}
	o.owner[id] = key
	return nil
}

// check is claim without claiming: a session nobody owns yet is fine.
func (o *sessionOwners) check(id, key string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if cur, ok := o.owner[id]; ok && cur != key {
		return sandbox.Errorf(sandbox.ErrNotFound, "session %q not found", id)
	}
	return nil
}
