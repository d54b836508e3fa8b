package driver

import (
	"errors"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// TestGateCases: an open gate runs what it holds, quietly when nothing
// else holds it; a closed one refuses with ErrUnavailable naming the
// backend, and Close runs its release once.
func TestGateCases(t *testing.T) {
	var g Gate
	var quietSeen bool
	if err := g.Hold("toy", func(quiet bool) error { quietSeen = quiet; return nil }); err != nil || !quietSeen {
		t.Fatalf("Hold on an open, idle gate = %v (quiet %v), want nil, quiet", err, quietSeen)
	}
	releases := 0
	release := func() error { releases++; return errors.New("released") }
	if err := g.Close(release); err == nil || err.Error() != "released" {
		t.Errorf("first Close = %v, want release's error", err)
	}
	if err := g.Close(release); err != nil || releases != 1 {
		t.Errorf("second Close = %v after %d releases, want nil after 1", err, releases)
	}
	err := g.Hold("toy", func(bool) error { t.Error("Hold ran f on a closed gate"); return nil })
	if !errors.Is(err, sandbox.ErrUnavailable) || err.Error() != "toy: executor is closed" {
		t.Errorf("Hold on a closed gate = %v, want ErrUnavailable %q", err, "toy: executor is closed")
	}
}
