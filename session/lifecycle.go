package session

import "time"

// New returns the header of a fresh top-level session with a new id,
// created now, in cwd (empty for none).
func New(cwd string, now time.Time) Header {
	return Header{ID: NewID(), CreatedAt: now.UnixMilli(), Cwd: cwd}
}

// Resume returns the header to continue a loaded session with: the same id
// and therefore the same location. It exists so that every lifecycle step
// reads alike at the call site.
func Resume(loaded Header) Header {
	return loaded
}

// Fork returns the header of a new session that copies the first
// seedLength events of src: a new id, parentSession = src.ID and
// seedLength set. Cwd, depth, origin and preset carry over.
func Fork(src Header, seedLength int64, now time.Time) Header {
	h := src
	h.ID = NewID()
	h.CreatedAt = now.UnixMilli()
	h.ParentSession = src.ID
	h.SeedLength = &seedLength
	return h
}

// Spawn returns the header of a subagent of parent: a new id,
// parentSession = parent.ID, origin "subagent" and delegationDepth one
// deeper. The child has no seed and no preset of its own unless preset is
// non-empty.
func Spawn(parent Header, preset string, now time.Time) Header {
	return Header{
		ID:              NewID(),
		CreatedAt:       now.UnixMilli(),
		Cwd:             parent.Cwd,
		ParentSession:   parent.ID,
		Origin:          OriginSubagent,
		DelegationDepth: parent.DelegationDepth + 1,
		AgentPreset:     preset,
	}
}
