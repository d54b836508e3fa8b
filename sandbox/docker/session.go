package docker

import (
	"path/filepath"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// sessionBind is how a call's session directory is staged: the bind
// whose destination is Dest (none when "") is id-mapped so that the
// directory's owner on disk, the harness user, is the call's host ids
// UID:GID (idmap.StageSession), read-only whatever the policy says.
type sessionBind struct {
	Dest     string
	UID, GID uint32
}

// sessionBind is the sessionBind of req's call with plan pl: the call's
// host ids are its container ids mapped through the engine's map when it
// runs in the engine's user namespace, its own ids otherwise.
func (e *Executor) sessionBind(req *sandbox.Request, pl *plan) sessionBind {
	m, ok := sandbox.NewPlan(req.Policy, req.Session, sandbox.Identity{UID: pl.uid, GID: pl.gid}).Mount(sandbox.MountTranscript)
	if !ok {
		return sessionBind{}
	}
	sb := sessionBind{Dest: filepath.Clean(m.Target), UID: pl.uid, GID: pl.gid}
	if pl.user.idmapped {
		// forCall checked that both are in the map.
		sb.UID, _ = policy.HostID(e.remap.UIDs, pl.uid)
		sb.GID, _ = policy.HostID(e.remap.GIDs, pl.gid)
	}
	return sb
}
