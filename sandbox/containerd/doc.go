// Package containerd is the sandbox backend on a containerd daemon (the
// v2 client; it also speaks to Debian's 1.6 daemon). Each call runs in
// its own container in the executor's namespace (default "dsh-sandbox"),
// on a fresh writable snapshot of the image with a read-only root set in
// the spec. The spec is built from the same policy.SpecOpts as the oci
// backend's; the task's FIFOs live in a directory under StateDir; stdio
// is attached before the task starts; process.Supervise handles timeout
// and cancellation; and the task, the container and its snapshot are
// removed on every path. Only runc runs (see checkRuntime for crun).
//
// Every call runs in a user namespace (sandbox/idmap, as on the oci
// backend with runc) unless its policy says user: host-root. Such a
// call's snapshot is mounted by the executor under StateDir (the mapped
// root could not reach it in the daemon's state directory), and a
// root-owned workspace, the session directory and the policy's mounts
// reach it through id-mapped staging mounts there; see userns.go and
// docs/identity.md.
//
// Faults: a daemon that is down, or goes away during a call, fails the
// call with sandbox.ErrUnavailable and no Result. The runc shim survives
// its daemon and would keep the command running, so the executor then
// sends SIGKILL to every process in the call's cgroup
// (/dsh-sandbox-containerd/<instance>/<call> in every hierarchy): an
// unknown outcome never leaves a sandboxed command running. What the
// teardown could not remove is left to Reap once the daemon is back.
//
// Leftovers are found by label (Reap); executors sharing a state
// directory tell live instances from dead ones by lock files
// (reap.LockInstance). Doctor explains what is missing; BenchCtrRun is
// the `ctr run --rm` baseline of `dsh-sandbox bench`.
//
// It imports sandbox, sandbox/driver (which runs its calls), sandbox/idmap,
// policy, images and the containerd
// client. Only cmd/dsh-sandbox (which picks backends) and tests import
// it.
package containerd
