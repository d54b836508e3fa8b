package backend

import (
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
)

// The time bounds of a doctor: DoctorRequestTimeout bounds each request
// it makes of a daemon or cluster, DoctorRunTimeout its test call
// (doctor.Run).
const (
	DoctorRequestTimeout = 10 * time.Second
	DoctorRunTimeout     = 60 * time.Second
)

// Checks collects a doctor's checks in order (what Descriptor.Doctor
// returns). The zero value is empty and ready to use.
type Checks []doctor.Check

// Keep appends c and reports whether it passed, so that a doctor can
// stop after a check the later ones depend on.
func (cs *Checks) Keep(c doctor.Check) bool {
	*cs = append(*cs, c)
	return c.OK
}

// Add keeps doctor.Checkf(name, ok, format, args...) and reports ok.
func (cs *Checks) Add(name string, ok bool, format string, args ...any) bool {
	return cs.Keep(doctor.Checkf(name, ok, format, args...))
}
