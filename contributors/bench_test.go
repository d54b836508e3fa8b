package contributors

import (
	"context"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// stringLocator does only string work, like a JSONL store's Locate.
type stringLocator struct{ root string }

func (s stringLocator) Locate(h session.Header) (persistence.Location, bool) {
	return persistence.Location{Kind: persistence.KindJSONL, Path: s.root + "/--work-project--/" + h.ID + "/session.jsonl"}, true
}

// BenchmarkCollect measures one Collect with the three built-in
// contributors for a call made by an agent. Target: ≤ 2µs per op.
func BenchmarkCollect(b *testing.B) {
	r := overlay.NewRegistry()
	var holder LocatorHolder
	holder.Set(stringLocator{root: "/srv/dsh/sessions"})
	if _, err := Install(r, holder.Get); err != nil {
		b.Fatal(err)
	}
	h := session.New("/srv/project", fixedTime)
	x := overlay.Execution{Home: "/srv/dsh", Session: &h}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		snap, err := r.Collect(ctx, x)
		if err != nil || snap.Len() != 4 {
			b.Fatalf("Collect() = %d keys, %v", snap.Len(), err)
		}
	}
}
