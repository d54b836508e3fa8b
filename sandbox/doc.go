// Package sandbox is the seam between the harness and the container
// backends: the Executor interface, the Request and Result of one call,
// the resolved Policy a backend enforces with its typed modes, the mount
// Plan of a call (NewPlan), the construction of a child's
// environment (DESIGN §3.6), output capture with tail and spill file, the
// model-facing rendering of a result, background jobs, and the error
// classes with their single mapping to exit codes.
//
// It imports only the standard library, the OCI runtime spec, redact
// (output redaction) and internal/safefile (redact.files). Backends
// live in subpackages (oci, local, docker, containerd) and import this
// package; nothing here imports a backend, a session store or hooks.
package sandbox
