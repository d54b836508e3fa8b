// Package oci is the sandbox backend that drives an OCI runtime binary —
// runc (the default), crun or runsc (gVisor) — directly: one bundle and
// one foreground `run` per call, torn down completely when the call ends
// (DESIGN §3.8, §3.11).
//
// A call goes: prepare.Call (validation, environment, timeout) →
// policy.ResolveUser → the call's user namespace (every runtime, unless
// the policy says user: host-root; idmap.go) → image (the generated
// `host` image or a stored one) → bundle directory with a marker, rootfs,
// id-mapped staging mounts for a container-root call, under runsc the
// staging mounts and read-only root gVisor's gofer needs (gofer.go), and
// config.json
// built from a base spec, the policy's spec options and this package's
// own → `runtime
// run` supervised by process.Supervise (SIGTERM to every process, then
// SIGKILL) → teardown on a detached context: `runtime delete --force`,
// cgroup directories in every hierarchy, staging and overlay unmounts,
// bundle removal.
// Reap removes what a crashed instance left; Doctor says whether a
// runtime is usable here; BenchRaw times a raw runtime call for the
// `dsh-sandbox bench` baseline.
//
// Only cmd/dsh-sandbox (which picks backends) and tests import this
// package. It imports sandbox, sandbox/driver (which runs its calls),
// sandbox/idmap, policy and images.
package oci
