package overlay

import (
	"context"

	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// Execution is what a resolver sees of one shell call. Build it with field
// names: fields will be added as the sandbox learns more about a call
// (workspace, call id, …), and a zero field always means "not known".
// Resolvers must treat it, and what Session points to, as read-only; the
// caller must not modify it while Collect runs.
type Execution struct {
	// Home is the absolute dsh home directory (see contributors.ResolveHome).
	// The built-in home contributor refuses an empty or relative Home.
	Home string
	// Session is the header of the agent session that made the call. Nil
	// means a call with no agent (for example `dsh-sandbox exec` without
	// --session-id); session-scoped keys are then absent.
	Session *session.Header
}

// KeyDecl declares one key a contributor may return.
type KeyDecl struct {
	// Key is the variable name, DSH_[A-Z][A-Z0-9_]*.
	Key string
	// Description says what the value means; it must not be blank.
	Description string
}

// ResolveFunc computes a contributor's values for one execution. It
// returns a subset of the declared keys; a key it leaves out is absent from
// the snapshot. Values are typed any so that a non-string value is detected
// and refused instead of being formatted silently. It may be called
// concurrently for overlapping executions and must honour ctx.
type ResolveFunc func(ctx context.Context, x Execution) (map[string]any, error)

// Contributor supplies DSH_* values. The registry copies Name and Keys when
// it is registered, so later changes to the struct have no effect.
type Contributor struct {
	// Name identifies the contributor in errors and in List; it must be
	// stable, non-blank, unique within a registry and free of control
	// characters and surrounding spaces.
	Name string
	// Keys declares every key Resolve may return, each with a description.
	// At least one key is required.
	Keys []KeyDecl
	// Resolve computes the values; it is required.
	Resolve ResolveFunc
}
