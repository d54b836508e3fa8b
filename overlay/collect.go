package overlay

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Collect runs every registered contributor for x, in name order, and
// returns the resulting snapshot. It is meant to run once per call,
// foreground or background; overlapping Collects share no mutable state,
// and registrations or disposals during a Collect do not affect it.
//
// It fails with a *CollectError naming the contributor (and key) when the
// context ends, a resolver fails, or a resolver returns a key it did not
// declare, a value that is not a string, or a string with a NUL byte. On
// error no partial snapshot is returned.
func (r *Registry) Collect(ctx context.Context, x Execution) (Snapshot, error) {
	s := r.load()
	entries := make([]entry, 0, s.nkeys)
	for _, reg := range s.regs {
		if err := ctx.Err(); err != nil {
			return Snapshot{}, &CollectError{Contributor: reg.name, Err: err}
		}
		values, err := reg.resolve(ctx, x)
		if err != nil {
			return Snapshot{}, &CollectError{Contributor: reg.name, Err: err}
		}
		for k, v := range values {
			if !reg.declares(k) {
				return Snapshot{}, &CollectError{Contributor: reg.name, Key: k, Err: ErrUndeclaredKey}
			}
			str, ok := v.(string)
			if !ok {
				return Snapshot{}, &CollectError{Contributor: reg.name, Key: k, Type: fmt.Sprintf("%T", v), Err: ErrNotString}
			}
			if strings.IndexByte(str, 0) >= 0 {
				return Snapshot{}, &CollectError{Contributor: reg.name, Key: k, Err: ErrNULInValue}
			}
			entries = append(entries, entry{key: k, value: str})
		}
	}
	// Keys are unique: each has exactly one owner and a map has no
	// duplicate keys.
	slices.SortFunc(entries, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	return Snapshot{entries: entries}, nil
}
