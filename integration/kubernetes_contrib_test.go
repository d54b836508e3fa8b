//go:build integration

package integration

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/scheme"
)

// applyManifest creates the objects of contrib/kubernetes/name in the test
// cluster, each after edit (nil: none) has seen it, and deletes them when
// the test ends. The Namespace is the test cluster's own (scripts/kube.sh
// made it), so it is checked, not created.
func applyManifest(t *testing.T, k kubeTest, name string, edit func(runtime.Object)) {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join("..", "contrib", "kubernetes", name))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---\n") {
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			t.Fatalf("contrib/kubernetes/%s: %v", name, err)
		}
		if edit != nil {
			edit(obj)
		}
		switch o := obj.(type) {
		case *corev1.Namespace:
			if o.Name != k.namespace {
				t.Fatalf("%s's namespace %q is not the test cluster's %q", name, o.Name, k.namespace)
			}
			continue
		case *corev1.ServiceAccount:
			_, err = k.cli.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() { _ = k.cli.CoreV1().ServiceAccounts(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{}) })
		case *rbacv1.Role:
			_, err = k.cli.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() { _ = k.cli.RbacV1().Roles(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{}) })
		case *rbacv1.RoleBinding:
			_, err = k.cli.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() { _ = k.cli.RbacV1().RoleBindings(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{}) })
		case *rbacv1.ClusterRole:
			_, err = k.cli.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() { _ = k.cli.RbacV1().ClusterRoles().Delete(ctx, o.Name, metav1.DeleteOptions{}) })
		case *rbacv1.ClusterRoleBinding:
			_, err = k.cli.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() { _ = k.cli.RbacV1().ClusterRoleBindings().Delete(ctx, o.Name, metav1.DeleteOptions{}) })
		case *corev1.ConfigMap:
			_, err = k.cli.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() { _ = k.cli.CoreV1().ConfigMaps(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{}) })
		case *corev1.Service:
			_, err = k.cli.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() { _ = k.cli.CoreV1().Services(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{}) })
		case *appsv1.Deployment:
			_, err = k.cli.AppsV1().Deployments(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
			t.Cleanup(func() {
				fg := metav1.DeletePropagationForeground
				_ = k.cli.AppsV1().Deployments(o.Namespace).Delete(ctx, o.Name, metav1.DeleteOptions{PropagationPolicy: &fg})
				k.waitPodsMatching(t, "pods of the deleted Deployment", "app="+o.Spec.Selector.MatchLabels["app"], func(p []string) bool { return len(p) == 0 })
			})
		default:
			t.Fatalf("contrib/kubernetes/%s holds a %T this test does not apply", name, obj)
		}
		if err != nil {
			t.Fatalf("apply %T from %s: %v", obj, name, err)
		}
	}
}

// TestKubernetesContribServe runs contrib/kubernetes/serve.yaml, with
// rbac.yaml, as docs/kubernetes.md says: the serve image and the tools
// image built with `dsh-sandbox images build` into the node's containerd,
// the token Secret made, and the manifests applied with only the paths
// that are this node's changed (the stub, the kubelet's seccomp
// directory, the workspace root). Then a client on the host calls the
// Deployment's serve over TCP with its token: the call runs in a pod of
// its own, as uid 1000, and the service's reap leaves no call pod. A
// wrong token is the refusal.
func TestKubernetesContribServe(t *testing.T) {
	k := requireKube(t)
	e := newEnv(t)
	ctx := context.Background()
	bin := filepath.Dir(binary)
	build := func(name string, add ...string) {
		args := append([]string{"images", "build", "--name", name, "--backend", "containerd",
			"--containerd-address", k.containerd, "--containerd-namespace", "k8s.io"}, e.flags("")...)
		for _, a := range add {
			args = append(args, "--add", a)
		}
		if r := run(t, nil, args...); r.code != 0 {
			t.Fatalf("images build %s: exit %d: %s", name, r.code, r.stderr)
		}
		t.Cleanup(func() {
			run(t, nil, append([]string{"images", "rm", "--backend", "containerd", "--containerd-address", k.containerd,
				"--containerd-namespace", "k8s.io", name}, e.flags("")...)...)
		})
	}
	build("dsh-sandbox.local/serve:1", "dsh-sandbox")
	build("dsh-sandbox.local/tools:1", "bash")

	// The workspace root of serve.yaml, on this node: made here, and
	// removed after, unless it was there before.
	const root = "/srv/work"
	if _, err := os.Stat(root); os.IsNotExist(err) {
		if err := os.MkdirAll(root, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(root) })
	}
	work, err := os.MkdirTemp(root, "contrib-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chown(work, 1000, 1000); err != nil {
		t.Fatal(err)
	}

	const token = "contrib-test-token-0123456789"
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "dsh-sandbox-tokens", Namespace: k.namespace},
		StringData: map[string]string{"tokens": "agent " + token + "\n"},
	}
	if _, err := k.cli.CoreV1().Secrets(k.namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = k.cli.CoreV1().Secrets(k.namespace).Delete(ctx, secret.Name, metav1.DeleteOptions{}) })

	// serve.yaml's init container gives the seccomp profiles' directory
	// to serve's uid; the other tests' executors run as root.
	t.Cleanup(func() { os.Chown(filepath.Join(k.seccomp, "dsh-sandbox"), 0, 0) })
	applyManifest(t, k, "rbac.yaml", nil)
	apiURL, err := url.Parse(k.cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	// Runs after serve.yaml's objects are gone: serve deleted its warm
	// pods when it was stopped.
	t.Cleanup(func() {
		k.waitPods(t, "call pods after serve.yaml's serve stopped", func(p []string) bool { return len(p) == 0 })
	})
	applyManifest(t, k, "serve.yaml", func(obj runtime.Object) {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			return
		}
		pod := &d.Spec.Template.Spec
		c := &pod.Containers[0]
		stub := filepath.Join(bin, "dsh-sandbox-stub")
		for i := range c.Env {
			if c.Env[i].Name == "DSH_SANDBOX_KUBE_STUB" {
				c.Env[i].Value = stub
			}
		}
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].Name == "stub" {
				c.VolumeMounts[i].MountPath = stub
			}
		}
		for _, v := range pod.Volumes {
			switch {
			case v.HostPath != nil && v.Name == "seccomp":
				v.HostPath.Path = k.seccomp
			case v.HostPath != nil && v.Name == "stub":
				v.HostPath.Path = stub
			}
		}
		// The test cluster's pod network reaches nothing, by design (a
		// call reaches neither the node nor the API server), and it has
		// no kube-proxy: serve runs in the node's network and is told
		// the API server's address.
		pod.HostNetwork = true
		c.Env = append(c.Env,
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: apiURL.Hostname()},
			corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: apiURL.Port()})
	})

	addr := "127.0.0.1:7878"
	deadline := time.Now().Add(120 * time.Second)
	for {
		l, err := k.cli.CoreV1().Pods(k.namespace).List(ctx, metav1.ListOptions{LabelSelector: "app=dsh-sandbox"})
		if err == nil && len(l.Items) == 1 && restarted(l.Items[0]) {
			t.Fatalf("serve.yaml's serve exited:\n%s\n%s", describePods(k, "app=dsh-sandbox"), serveLogs(k))
		}
		if err == nil && len(l.Items) == 1 && l.Items[0].Status.Phase == corev1.PodRunning {
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 120 s the serve pod does not answer on %s:\n%s\n%s", addr, describePods(k, "app=dsh-sandbox"), serveLogs(k))
		}
		time.Sleep(300 * time.Millisecond)
	}

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	call := func(tokenFile string) result {
		return run(t, nil, "exec", "--server", "tcp://"+addr, "--token-file", tokenFile, "--policy", "kube", "--cwd", work, "--", "id -u; echo in-a-pod")
	}
	if r := call(tokenFile); r.code != 0 || r.stdout != "1000\nin-a-pod\n" {
		t.Errorf("exec through serve.yaml's service = %d, %q, %q; want uid 1000 and the output\n%s", r.code, r.stdout, r.stderr, serveLogs(k))
	}
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("not-the-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := call(wrong); r.code == 0 || r.stdout != "" || !strings.Contains(strings.ToLower(r.stderr), "token") {
		t.Errorf("exec with a wrong token = %d, %q, %q; want a refusal naming the token", r.code, r.stdout, r.stderr)
	} else {
		t.Logf("a wrong token: exit %d, %s", r.code, strings.TrimSpace(r.stderr))
	}
	k.waitPods(t, "call pods left after the calls", func(p []string) bool { return len(p) <= 2 }) // serve.yaml keeps 2 warm pods
}

// describePods says each pod's phase and its containers' states.
func describePods(k kubeTest, selector string) string {
	l, err := k.cli.CoreV1().Pods(k.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range l.Items {
		fmt.Fprintf(&b, "%s %s:", p.Name, p.Status.Phase)
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			fmt.Fprintf(&b, " %s %+v", cs.Name, cs.State)
			if t := cs.LastTerminationState.Terminated; t != nil {
				fmt.Fprintf(&b, " (last: exit %d %s)", t.ExitCode, t.Reason)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// restarted reports whether a container of p, init containers included,
// has exited and been started again.
func restarted(p corev1.Pod) bool {
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		if cs.RestartCount > 0 {
			return true
		}
	}
	return false
}

// serveLogs is the log of each container of the serve pod of serve.yaml
// (of its last run when it was started again).
func serveLogs(k kubeTest) string {
	l, err := k.cli.CoreV1().Pods(k.namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app=dsh-sandbox"})
	if err != nil || len(l.Items) == 0 {
		return fmt.Sprintf("no serve pod (%v)", err)
	}
	p := l.Items[0]
	var b strings.Builder
	for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
		opts := &corev1.PodLogOptions{Container: cs.Name, Previous: cs.RestartCount > 0}
		raw, err := k.cli.CoreV1().Pods(k.namespace).GetLogs(p.Name, opts).Do(context.Background()).Raw()
		if err != nil {
			raw = []byte(err.Error())
		}
		fmt.Fprintf(&b, "log of %s:\n%s\n", cs.Name, raw)
	}
	return b.String()
}
