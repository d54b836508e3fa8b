// Package kubernetes is the sandbox backend on a Kubernetes cluster: each
// call runs in a pod of its own, created through the API server with
// client-go, whose one container runs the stub (cmd/dsh-sandbox-stub in
// attach mode, package sandbox/stub) and waits; the call is bound through
// the pod's attach stream — the argv, environment and working directory
// travel in the stub's call message, the stdin, signals, output and exit
// status in its frames — and the pod is deleted when the call returns. A
// pod serves exactly one call. Nothing of the call appears in the pod's
// spec, a URL, an event or the API server's audit log: the spec names only
// the image, the stub, the mounts, the identity and the limits; the
// kubelet's own variables (KUBERNETES_SERVICE_*, HOSTNAME) never reach the
// command, whose environment is exactly the call's (DESIGN §3.6). Warm
// pods (Options.Warm) are created ahead of demand, per policy shape, and
// a call takes one instead of waiting for a pod to start; a miss creates
// one (cold).
//
// The pod has the shape of the other backends' containers: the policy's
// user (a call that would run as uid 0 is refused unless the policy names
// it: the cluster runs pods without user namespaces, see docs/kubernetes.md),
// runAsNonRoot for every other uid, a read-only root, no capabilities, no
// privilege escalation, the policy's seccomp profile as a Localhost
// profile written to the kubelet's seccomp directory
// (Options.SeccompDir; RuntimeDefault only when Options.RuntimeDefaultSeccomp
// says so), no service-account token, no service links, resources from the
// limits, activeDeadlineSeconds as a backstop to the stub's own deadline,
// the workspace and the session directory as hostPath volumes at their
// own paths (the session directory read-only; a single-node cluster, or
// nodes sharing those paths), and memory emptyDirs for the tmpfs mounts.
// A policy.runtime other than runc needs a RuntimeClass of that name;
// network allowlist and terminals are refused: never a weaker fallback.
//
// Besides the Executor it has Reap (pods of dead instances, by label),
// Doctor (API server, version, namespace, permissions, stub, seccomp
// directory, RuntimeClass) and the kubernetes descriptor.
//
// It imports sandbox, sandbox/driver (which runs its calls), sandbox/stub
// (the protocol), policy, images and client-go. Only cmd/dsh-sandbox
// (which picks backends) and tests import it.
package kubernetes
