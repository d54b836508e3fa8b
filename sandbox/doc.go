// Package sandbox is the seam between the harness and the container
// backends, and holds the contract only: the Executor interface, the
// Request of one call and its Result, the resolved Policy a backend
// enforces with its typed modes, the prepared Call, the mount Plan of a
// call (NewPlan, read by enforcement and `policy check` alike), the error
// classes with their single mapping to exit codes, and the results of
// background jobs that API clients read.
//
// The mechanisms live in packages named for what they do: prepare
// (validation, a Request resolved into a Call, host paths), childenv (a
// child's environment), secrets (what output must not show), hostpath
// (paths resolved without following links), acl (POSIX ACLs), capture
// (output tails and spill files), jobs (background calls) and reap
// (labels, instance locks, leftovers). Backends live in subpackages (oci,
// local, docker, containerd, kubernetes) and import this package; nothing
// here imports a mechanism, a backend, a session store or hooks.
//
// It imports only the standard library, redact (the secrets a Call
// carries) and signals (for ExitCode), so that API clients link little;
// the OCI runtime spec's options are policy's (policy.SpecOpt).
package sandbox
