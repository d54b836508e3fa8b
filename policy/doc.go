// Package policy turns a sandbox policy — a YAML or JSON file (DESIGN
// §3.9) or one of the built-in profiles read-only, workspace-write and ci —
// into a resolved, validated sandbox.Policy; explains in plain English what
// a call under it may read, write and reach; resolves the user a call runs
// as; decides, once, which host paths a call sees (Plan, the mount plan
// that enforcement and reporting both read); and maps a policy plus the
// call's session onto the OCI runtime-spec
// options (SpecOpt) that every OCI-speaking backend applies:
// namespaces (under network allowlist, joining the egress namespace of
// package egress), no capabilities, no-new-privileges, Docker's default seccomp
// profile, masked /proc paths, the device allow-list, cgroup limits, a
// read-only root, tmpfs and bind mounts, the user and rlimits.
//
// Everything here is a pure function of its arguments except Load (reads a
// file), ResolveUser, Warnings and ExplainSession (stat the session's
// directories) and
// WithDefaultSeccomp (builds the profile once for this host's kernel and
// architecture). Nothing here starts a container. Every function is safe for concurrent use, and
// the policies and options it returns share no mutable memory with the
// package or with each other.
//
// It imports sandbox, egress (to check network.allow and network.deny),
// the OCI runtime spec, Docker's seccomp profile and a YAML decoder. Backends (sandbox/oci, sandbox/containerd, …), the service
// and cmd/dsh-sandbox may import it; sandbox and the layers below it never
// do.
package policy
