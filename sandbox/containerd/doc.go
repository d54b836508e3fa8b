// Package containerd is the sandbox backend on a containerd daemon (the
// v2 client; it also speaks to Debian's 1.6 daemon). Each call runs in
// its own container in the executor's namespace (default "dsh-sandbox"),
// on a fresh writable snapshot of the image with a read-only root set in
// the spec. The spec is built from the same policy.SpecOpts as the oci
// backend's; the task's FIFOs live in a directory under StateDir; stdio
// is attached before the task starts; sandbox.Supervise handles timeout
// and cancellation; and the task, the container and its snapshot are
// removed on every path. Leftovers are found by label (Reap).
//
// It imports sandbox, policy, images and the containerd client. Only
// cmd/dsh-sandbox (which picks backends) and tests import it.
package containerd
