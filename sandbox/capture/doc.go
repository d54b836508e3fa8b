// Package capture records the output streams of a call: a Writer keeps
// the exact byte count, a bounded tail in memory (Tail) and, once the
// stream outgrows the tail, a spill file created without following links,
// with the call's secrets redacted before anything sees them. ForCall
// makes a call's two writers, after bounding its spill directory
// (PruneSpill) and sharing what is left between them (SpillBudget).
//
// It imports the standard library, redact, sandbox, acl and hostpath; the
// driver, the oci backend and jobs import it.
package capture
