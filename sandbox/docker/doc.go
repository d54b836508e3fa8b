// Package docker is the sandbox backend on a Docker engine: each call runs
// in its own container, created through the engine API (with API version
// negotiation, so an older daemon such as Debian's 20.10 / API 1.41
// works), attached before it starts so that no output is lost, supervised
// with process.Supervise and removed on every path. The container has the
// same shape as the oci backend's: no network (under network allowlist
// only the egress servers, which the service starts in the container's
// namespace while its pid 1 waits: egress.go), a read-only root, no
// capabilities, no-new-privileges, the policy's seccomp profile (the one
// the oci and containerd backends install, handed to the engine instead
// of its own default), a cgroup namespace of its own, the policy's masked
// /proc and /sys paths, tmpfs /tmp, the workspace and the session
// directory bound at their own paths from nosuid,nodev(,noexec) staging
// mounts (binds.go: the engine cannot set those flags), cgroup limits,
// the policy's user and the sandbox labels. On an engine that remaps user
// namespaces (dockerd --userns-remap) every call runs in the engine's
// namespace and its binds are id-mapped with the engine's map, so that it
// never has host uid 0; on one that does not, a call as uid 0 is refused
// unless the policy says user: host-root (userns.go, docs/identity.md).
// An out-of-memory kill is read
// from the engine's container state before removal. The
// container has no log driver: its output reaches the caller only through
// the attach stream, and the engine keeps no copy of it on disk. An engine
// that is down or goes away during a call gives sandbox.ErrUnavailable,
// never a made-up exit status; so does a policy.runtime (e.g. runsc) the
// engine has not registered, never another runtime.
//
// Besides the Executor it has ImportRootfs (tarball to labelled image),
// Reap (leftover containers, staging mounts and unnamed images), Doctor (what is missing)
// and BenchDockerRun (the `docker run --rm` baseline of `dsh-sandbox
// bench`).
//
// It imports sandbox, sandbox/driver (which runs its calls), policy,
// images, egress and the Docker client. Only
// cmd/dsh-sandbox (which picks backends) and tests import it.
package docker
