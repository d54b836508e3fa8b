package overlay

import (
	"iter"
	"slices"
	"strings"
)

// Snapshot is the DSH_* environment of one execution, sorted by key. It is
// immutable: no method exposes its storage, so it is safe to share between
// goroutines and to copy. The zero value is an empty snapshot.
type Snapshot struct {
	entries []entry // sorted by key, keys unique
}

type entry struct {
	key, value string
}

// Get returns the value of key and whether the snapshot has it.
func (s Snapshot) Get(key string) (string, bool) {
	i, found := slices.BinarySearchFunc(s.entries, key, func(e entry, k string) int {
		return strings.Compare(e.key, k)
	})
	if !found {
		return "", false
	}
	return s.entries[i].value, true
}

// Len returns the number of keys.
func (s Snapshot) Len() int { return len(s.entries) }

// Keys returns the keys in sorted order, in a new slice.
func (s Snapshot) Keys() []string {
	out := make([]string, len(s.entries))
	for i, e := range s.entries {
		out[i] = e.key
	}
	return out
}

// Environ returns the snapshot as sorted "KEY=VALUE" strings, in a new
// slice, ready to append as the last layer of a child's environment.
func (s Snapshot) Environ() []string {
	out := make([]string, len(s.entries))
	for i, e := range s.entries {
		out[i] = e.key + "=" + e.value
	}
	return out
}

// All yields the key/value pairs in sorted order without allocating.
func (s Snapshot) All() iter.Seq2[string, string] {
	return func(yield func(string, string) bool) {
		for _, e := range s.entries {
			if !yield(e.key, e.value) {
				return
			}
		}
	}
}
