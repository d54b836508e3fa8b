// Package cgroup reads what the kernel's control groups say about a
// finished call: OOMKilled reports whether the out-of-memory killer
// struck in the call's cgroups (cgroup v1 or v2). It imports only the
// standard library; the oci and containerd backends import it.
package cgroup
