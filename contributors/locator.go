package contributors

import (
	"sync/atomic"

	"github.com/dsh-sandbox/dsh-sandbox/persistence"
)

// LocatorHolder holds the current persistence.Locator so the wiring can
// swap the persistence service while calls run; pass its Get method to
// Install. The zero value holds no Locator. It is safe for concurrent use
// and must not be copied after first use.
type LocatorHolder struct {
	p atomic.Pointer[locatorBox]
}

// locatorBox lets the holder store any Locator, including nil.
type locatorBox struct{ l persistence.Locator }

// Set makes l the current Locator; nil means no persistence. Snapshots
// already collected keep the values they had.
func (h *LocatorHolder) Set(l persistence.Locator) { h.p.Store(&locatorBox{l: l}) }

// Get returns the current Locator, or nil when none is set.
func (h *LocatorHolder) Get() persistence.Locator {
	if b := h.p.Load(); b != nil {
		return b.l
	}
	return nil
}
