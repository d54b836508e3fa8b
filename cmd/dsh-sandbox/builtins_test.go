package main

import (
	"slices"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestBuiltinsAreWhatPoliciesName: the backends and runtimes this program
// links are exactly those a policy may name (sandbox.Backends,
// sandbox.Runtimes), default first, so that neither list drifts from
// the other.
func TestBuiltinsAreWhatPoliciesName(t *testing.T) {
	if got := backends.Names(nil); !slices.Equal(got, sandbox.Backends) {
		t.Errorf("registered backends %q, want sandbox.Backends %q", got, sandbox.Backends)
	}
	if runtimes := backends.Runtimes(); !slices.Equal(runtimes, sandbox.Runtimes) {
		t.Errorf("registered runtimes %q, want sandbox.Runtimes %q", runtimes, sandbox.Runtimes)
	}
}
