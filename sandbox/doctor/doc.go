// Package doctor holds what every backend's Doctor is made of: the Check
// a doctor reports (what was checked, whether it passed, what was found),
// Checkf to make one, and the checks all backends share: StateDir (the
// state directory takes a new file; the detail names its file system)
// and Run (one real call of `true`).
//
// It imports only the standard library and sandbox; the backends, the
// backend registry and the CLI import it.
package doctor
