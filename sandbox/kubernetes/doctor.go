package kubernetes

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/version"
	k8s "k8s.io/client-go/kubernetes"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
)

// MinMinor is the oldest Kubernetes 1.x minor release the backend
// supports: older ones are past their upstream support.
const MinMinor = 30

// podVerbs are the permissions the backend needs on pods of its
// namespace (contrib/kubernetes/rbac.yaml grants them).
var podVerbs = []struct{ verb, subresource string }{
	{"create", ""}, {"get", ""}, {"list", ""}, {"watch", ""}, {"delete", ""}, {"deletecollection", ""},
	{"create", "attach"},
}

// Doctor reports whether the kubernetes backend is usable with opts, as
// checks in this order: "cluster" (the API server answers, with its
// version), "version" (1.MinMinor or later), "namespace" (opts.Namespace exists), "permissions" (what the
// backend needs on pods, asked with SelfSubjectAccessReviews), "nodes"
// (how many are Ready: on more than one, the workspace and session
// directories must be on storage every node sees at the same paths),
// "stub" (the stub binary exists on this host, which the hostPath
// volume assumes is the node), "seccomp" (where the policy's profile
// goes, or that the runtime's default was chosen) and "runtimeclasses"
// (which runtimes other than runc the cluster offers). It creates
// nothing.
func Doctor(ctx context.Context, opts Options) []doctor.Check {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	cli, err := k8s.NewForConfig(opts.Config)
	if err != nil {
		return []doctor.Check{doctor.Checkf("cluster", false, "%v", err)}
	}
	v, err := cli.Discovery().ServerVersion()
	if err != nil {
		return []doctor.Check{doctor.Checkf("cluster", false, "no API server answers at %s: %v", opts.Config.Host, err)}
	}
	checks := []doctor.Check{
		doctor.Checkf("cluster", true, "API server at %s: Kubernetes %s", opts.Config.Host, v.GitVersion),
		versionCheck(v),
	}
	dctx, cancel := context.WithTimeout(ctx, backend.DoctorRequestTimeout)
	defer cancel()
	checks = append(checks, namespaceCheck(dctx, cli, opts.Namespace))
	checks = append(checks, permissionsCheck(dctx, cli, opts.Namespace))
	checks = append(checks, nodeChecks(dctx, cli, opts.Node)...)
	checks = append(checks, stubCheck(opts.Stub))
	checks = append(checks, seccompCheck(opts))
	checks = append(checks, runtimeClassesCheck(dctx, cli))
	return checks
}

// versionCheck says whether the API server's version v is 1.MinMinor or
// later.
func versionCheck(v *version.Info) doctor.Check {
	major, _ := strconv.Atoi(v.Major)
	minor, _ := strconv.Atoi(strings.TrimRight(v.Minor, "+"))
	if major > 1 || (major == 1 && minor >= MinMinor) {
		return doctor.Checkf("version", true, "Kubernetes %s.%d is 1.%d or later (tested: the release scripts/kube.sh builds)", v.Major, minor, MinMinor)
	}
	return doctor.Checkf("version", false, "Kubernetes %s.%s is older than 1.%d, which this backend needs", v.Major, v.Minor, MinMinor)
}

// namespaceCheck says whether the namespace exists.
func namespaceCheck(ctx context.Context, cli k8s.Interface, namespace string) doctor.Check {
	if _, err := cli.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{}); err != nil {
		return doctor.Checkf("namespace", false, "namespace %q: %v (create it, see contrib/kubernetes/)", namespace, err)
	}
	return doctor.Checkf("namespace", true, "namespace %q exists", namespace)
}

// permissionsCheck says whether the backend has every permission of
// podVerbs in the namespace, asked with SelfSubjectAccessReviews, and
// names those it lacks.
func permissionsCheck(ctx context.Context, cli k8s.Interface, namespace string) doctor.Check {
	var missing []string
	for _, pv := range podVerbs {
		r, err := cli.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authv1.SelfSubjectAccessReview{
			Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authv1.ResourceAttributes{
				Namespace: namespace, Verb: pv.verb, Resource: "pods", Subresource: pv.subresource,
			}},
		}, metav1.CreateOptions{})
		name := pv.verb + " pods"
		if pv.subresource != "" {
			name += "/" + pv.subresource
		}
		if err != nil {
			missing = append(missing, name+" ("+err.Error()+")")
		} else if !r.Status.Allowed {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return doctor.Checkf("permissions", false, "missing in namespace %q: %s (contrib/kubernetes/rbac.yaml)", namespace, strings.Join(missing, ", "))
	}
	return doctor.Checkf("permissions", true, "pods: create, get, list, watch, delete, attach in %q", namespace)
}

// nodeChecks says how many of the cluster's nodes are Ready (none counts
// as Ready when node, if set, names none of them) and whether they
// support user namespaces; one failed "nodes" check when the nodes
// cannot be listed.
func nodeChecks(ctx context.Context, cli k8s.Interface, node string) []doctor.Check {
	nodes, err := cli.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []doctor.Check{doctor.Checkf("nodes", false, "list nodes: %v", err)}
	}
	ready := readyNodes(nodes.Items)
	detail := fmt.Sprintf("%d of %d nodes Ready", ready, len(nodes.Items))
	if node != "" {
		i := slices.IndexFunc(nodes.Items, func(n corev1.Node) bool { return n.Name == node })
		if i < 0 {
			ready = 0
			detail += fmt.Sprintf("; %s=%q names no node", EnvNode, node)
		} else {
			detail += fmt.Sprintf("; every pod goes to node %s (%s), not through the scheduler", node, EnvNode)
		}
	}
	if len(nodes.Items) > 1 {
		detail += "; the workspace, session directories and the stub must be at the same paths on every node (docs/kubernetes.md)"
	}
	return []doctor.Check{
		doctor.Checkf("nodes", ready > 0, "%s", detail),
		doctor.Checkf("user namespaces", true, "%s", userNamespaces(nodes.Items)),
	}
}

// readyNodes counts the nodes whose Ready condition is true.
func readyNodes(nodes []corev1.Node) int {
	ready := 0
	for _, n := range nodes {
		for _, c := range n.Status.Conditions {
			if c.Type == "Ready" && c.Status == "True" {
				ready++
			}
		}
	}
	return ready
}

// stubCheck says whether the stub at path is a regular file on this
// host.
func stubCheck(path string) doctor.Check {
	if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
		return doctor.Checkf("stub", false, "stub %q: not found (CGO_ENABLED=0 go build ./cmd/dsh-sandbox-stub; set %s)", path, EnvStub)
	}
	return doctor.Checkf("stub", true, "stub %s, mounted at %s in every pod", path, StubTarget)
}

// seccompCheck says where the policy's seccomp profile goes with opts,
// or that the runtime's default profile was chosen; it fails when
// neither is configured or the directory does not exist.
func seccompCheck(opts Options) doctor.Check {
	switch {
	case opts.SeccompDir != "":
		if fi, err := os.Stat(opts.SeccompDir); err != nil || !fi.IsDir() {
			return doctor.Checkf("seccomp", false, "the kubelet's seccomp directory %q does not exist here (%s)", opts.SeccompDir, EnvSeccompDir)
		}
		return doctor.Checkf("seccomp", true, "the policy's profile goes to %s as a Localhost profile", opts.SeccompDir)
	case opts.RuntimeDefaultSeccomp:
		return doctor.Checkf("seccomp", true, "the container runtime's default profile (%s=runtime-default), not the policy's", EnvSeccomp)
	default:
		return doctor.Checkf("seccomp", false, "set %s to the kubelet's seccomp directory (<root-dir>/seccomp), or %s=runtime-default", EnvSeccompDir, EnvSeccomp)
	}
}

// runtimeClassesCheck names the cluster's RuntimeClasses and their
// handlers.
func runtimeClassesCheck(ctx context.Context, cli k8s.Interface) doctor.Check {
	rcs, err := cli.NodeV1().RuntimeClasses().List(ctx, metav1.ListOptions{})
	if err != nil {
		return doctor.Checkf("runtimeclasses", false, "list RuntimeClasses: %v", err)
	}
	var names []string
	for _, rc := range rcs.Items {
		names = append(names, rc.Name+" (handler "+rc.Handler+")")
	}
	if len(names) == 0 {
		return doctor.Checkf("runtimeclasses", true, "none: calls run on the cluster's default runtime (policy.runtime runc); runsc and crun are refused")
	}
	return doctor.Checkf("runtimeclasses", true, "%s", strings.Join(names, ", "))
}

// userNamespaces says which nodes' default runtime handler reports user
// namespaces (hostUsers: false), as the kubelet does in
// status.runtimeHandlers. This backend runs pods without them: uid 0 in
// a pod is the node's root, so policy user auto resolving to root is
// refused.
func userNamespaces(nodes []corev1.Node) string {
	var with, without []string
	for _, n := range nodes {
		ok := slices.ContainsFunc(n.Status.RuntimeHandlers, func(h corev1.NodeRuntimeHandler) bool {
			return h.Name == "" && h.Features != nil && h.Features.UserNamespaces != nil && *h.Features.UserNamespaces
		})
		desc := fmt.Sprintf("%s (%s, kernel %s)", n.Name, n.Status.NodeInfo.ContainerRuntimeVersion, n.Status.NodeInfo.KernelVersion)
		if ok {
			with = append(with, desc)
		} else {
			without = append(without, desc)
		}
	}
	msg := "pods run in the node's user namespace (hostUsers is not set)"
	if len(without) > 0 {
		msg += "; no user namespaces on " + strings.Join(without, ", ") +
			": the kubelet reports none for the runtime's default handler (they need containerd 2.0 or later with runc 1.2 or later, and Linux 6.3 or later)"
	}
	if len(with) > 0 {
		msg += "; " + strings.Join(with, ", ") + " would support them"
	}
	return msg
}
