package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/containerd"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/sandboxtest"
)

// The test cluster's environment, as scripts/kube.sh start prints it.
const (
	envKubeconfig = "DSH_SANDBOX_TEST_KUBECONFIG"
	envNamespace  = "DSH_SANDBOX_TEST_KUBE_NAMESPACE"
	envContainerd = "DSH_SANDBOX_TEST_KUBE_CONTAINERD"
	envSeccompDir = "DSH_SANDBOX_TEST_KUBE_SECCOMP_DIR"
	envAuditLog   = "DSH_SANDBOX_TEST_KUBE_AUDIT_LOG"
)

var testImageEnv = []string{"PATH=" + images.DefaultPath}

// requireCluster skips the test unless scripts/kube.sh's cluster is
// there (its environment set, running as root); under CI=true it fails
// instead.
func requireCluster(t testing.TB) *rest.Config {
	t.Helper()
	missing := ""
	var cfg *rest.Config
	switch {
	case os.Getenv(envKubeconfig) == "":
		missing = "no test cluster: " + envKubeconfig + " is unset (eval \"$(scripts/kube.sh start)\" starts one)"
	case os.Geteuid() != 0:
		missing = fmt.Sprintf("the kubernetes backend tests need root (running as uid %d)", os.Geteuid())
	case stubErr != nil:
		missing = "cannot build the stub: " + stubErr.Error()
	default:
		var err error
		cfg, err = clientcmd.BuildConfigFromFlags("", os.Getenv(envKubeconfig))
		if err != nil {
			missing = fmt.Sprintf("%s: %v", envKubeconfig, err)
		}
	}
	if missing == "" {
		return cfg
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI=true but %s", missing)
	}
	t.Skip(missing)
	return nil
}

var (
	imageOnce sync.Once
	imageErr  error
)

// importTestImage imports the test image into the cluster's containerd
// once per test process, with the containerd backend's importer.
func importTestImage(t testing.TB) {
	t.Helper()
	imageOnce.Do(func() {
		sock := os.Getenv(envContainerd)
		if sock == "" {
			imageErr = fmt.Errorf("%s is unset", envContainerd)
			return
		}
		state, err := os.MkdirTemp("", "dsh-sandbox-kube-import-")
		if err != nil {
			imageErr = err
			return
		}
		defer os.RemoveAll(state)
		ctx := context.Background()
		ce, err := containerd.New(ctx, containerd.Options{Address: sock, Namespace: "k8s.io", Service: driver.Service{StateDir: state}})
		if err != nil {
			imageErr = err
			return
		}
		defer ce.Close()
		var tar bytes.Buffer
		if err := images.BusyboxWith(&tar, "bash"); err != nil {
			imageErr = fmt.Errorf("busybox test image (install busybox-static and bash): %w", err)
			return
		}
		imageErr = ce.ImportRootfs(ctx, &tar, testImage, testImageEnv)
	})
	if imageErr != nil {
		t.Fatalf("import %s into the cluster: %v", testImage, imageErr)
	}
}

// newTestExecutor returns an executor on the test cluster, closed when
// the test ends, with warm pods per shape.
func newTestExecutor(t testing.TB, warm int) *Executor {
	t.Helper()
	return newTestExecutorWith(t, func(o *Options) { o.Warm = warm })
}

// newTestExecutorWith is newTestExecutor with options set changes.
func newTestExecutorWith(t testing.TB, set func(*Options)) *Executor {
	t.Helper()
	cfg := requireCluster(t)
	importTestImage(t)
	opts := Options{
		Config:     cfg,
		Namespace:  os.Getenv(envNamespace),
		Service:    driver.Service{StateDir: t.TempDir(), Detector: calls.Detector{}, Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))},
		Stub:       stubPath,
		SeccompDir: os.Getenv(envSeccompDir),
		ImageEnv:   testImageEnv,
	}
	set(&opts)
	e, err := New(t.Context(), opts)
	if err != nil {
		t.Fatalf("New() = %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
		if left, err := e.Pods(context.Background()); err != nil || len(left) > 0 {
			t.Errorf("pods left after Close: %v (err %v)", left, err)
		}
	})
	return e
}

// testPolicy is the built-in workspace-write policy on the test image, as
// uid 0 named explicitly: the suite's workspaces belong to root, and
// auto would resolve to uid 0, which this backend refuses unless the
// policy names it (TestAutoRootRefused).
func testPolicy(t testing.TB) sandbox.Policy {
	t.Helper()
	p, ok := policy.Builtin(policy.WorkspaceWrite)
	if !ok {
		t.Fatalf("policy.Builtin(%q) not found", policy.WorkspaceWrite)
	}
	p.Backend, p.Image, p.User = Backend, testImage, "0:0"
	return p
}

// leftovers lists e's pods, once the deletions of ended calls' pods are
// done.
func leftovers(e *Executor) []string {
	e.settle()
	pods, err := e.Pods(context.Background())
	if err != nil {
		return []string{"list pods: " + err.Error()}
	}
	for i, p := range pods {
		pods[i] = "pod " + p
	}
	return pods
}

// TestConformance runs the sandboxtest suite on the cluster, unchanged,
// with every call's pod created on demand.
func TestConformance(t *testing.T) {
	requireCluster(t)
	var e *Executor
	cfg := sandboxtest.Subject{
		New: func(t *testing.T) sandbox.Executor {
			e = newTestExecutor(t, 0)
			return e
		},
		Policy:    testPolicy(t),
		ImageEnv:  testImageEnv,
		Leftovers: func(t *testing.T) []string { return leftovers(e) },
		Isolated:  true,
		// What a pod cannot have (docs/kubernetes.md, "Where a pod
		// differs"); each is a property of the pod API or the node, not
		// of this backend.
		NotApplicable: map[string]string{
			"network-none": "a pod always has the cluster network's interface (eth0); policy network none is enforced by that network " +
				"(scripts/kube.sh: a bridge with no gateway and every port isolated), which TestNetworkIsolation checks by reachability",
			"pids-limit": "the pod API has no per-pod pids limit: the kubelet's podPidsLimit (1024 on the test cluster) applies, not the policy's",
			"bind-mount-flags": "the kubelet binds hostPath volumes without nosuid, nodev and noexec, and the pod API has no mount options " +
				"(no capabilities, no-new-privileges and the seccomp profile stand in for them)",
			"proc-cmdline-masked": "the pod API has no maskedPaths, the container runtime's default masks leave /proc/cmdline readable, " +
				"and runc refuses any volume mounted over it (/sys/kernel/vmcoreinfo, which it allows, is masked)",
		},
	}
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		cfg.NotApplicable["cgroup-namespace"] = "containerd gives a pod a cgroup namespace of its own only on a cgroup v2 node, " +
			"and this node is cgroup v1 (the call sees its pod's cgroup path)"
	}
	sandboxtest.Run(t, cfg)
}

// request is a call of command in a fresh workspace under p.
func request(t *testing.T, p sandbox.Policy, command string) *sandbox.Request {
	t.Helper()
	return &sandbox.Request{Command: command, Policy: p, Session: sandbox.Session{Cwd: t.TempDir()}, TimeoutMs: 60_000}
}

func run(t *testing.T, e *Executor, req *sandbox.Request) *sandbox.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res, err := e.Run(ctx, req)
	if err != nil {
		t.Fatalf("Run(%q) = %v", req.Command, err)
	}
	return res
}

// TestWarmPod: with warm pods a call takes a pod created ahead of it, and
// the pool refills; each pod serves one call.
func TestWarmPod(t *testing.T) {
	e := newTestExecutor(t, 1)
	p := testPolicy(t)
	seen := map[string]bool{}
	for i := range 3 {
		res := run(t, e, request(t, p, "echo call-$((1+1))"))
		if res.ExitCode == nil || *res.ExitCode != 0 || res.Stdout.Text != "call-2\n" {
			t.Fatalf("call %d: exit %v stdout %q stderr %q", i, res.ExitCode, res.Stdout.Text, res.Stderr.Text)
		}
		id := res.Sandbox.ContainerID
		if seen[id] {
			t.Fatalf("call %d ran in pod %s again", i, id)
		}
		seen[id] = true
		// Give the pool time to refill so that the next call is warm.
		waitWarm(t, e)
	}
}

// TestNodePinned: with Options.Node every pod goes to that node without
// the scheduler (no Scheduled event for it, while the kubelet's Started
// comes), and is refused at New when the cluster has no such node.
func TestNodePinned(t *testing.T) {
	cfg := requireCluster(t)
	cli, err := k8s.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := cli.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("list nodes = %v, %v", nodes, err)
	}
	node := nodes.Items[0].Name
	if _, err := New(t.Context(), Options{Config: cfg, Namespace: os.Getenv(envNamespace), Service: driver.Service{StateDir: t.TempDir()}, Stub: stubPath, Node: "no-such-node"}); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "no-such-node") {
		t.Errorf("New(Node: no-such-node) = %v, want ErrInvalid naming it", err)
	}
	e := newTestExecutorWith(t, func(o *Options) { o.Node = node })
	res := run(t, e, request(t, testPolicy(t), "echo pinned"))
	if res.ExitCode == nil || *res.ExitCode != 0 || res.Stdout.Text != "pinned\n" {
		t.Fatalf("exit %v stdout %q stderr %q", res.ExitCode, res.Stdout.Text, res.Stderr.Text)
	}
	pod := res.Sandbox.ContainerID
	deadline := time.Now().Add(60 * time.Second)
	for {
		evs, err := cli.CoreV1().Events(e.Namespace()).List(t.Context(), metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod).String(),
		})
		if err != nil {
			t.Fatal(err)
		}
		var reasons []string
		for _, ev := range evs.Items {
			reasons = append(reasons, ev.Reason)
		}
		if slices.Contains(reasons, "Scheduled") || slices.Contains(reasons, "MissingClusterDNS") {
			t.Fatalf("pod %s on node %s: events %v; want neither the scheduler's nor a DNS fallback", pod, node, reasons)
		}
		if slices.Contains(reasons, "Started") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s: events %v after 60 s, want Started", pod, reasons)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitWarm waits until every warm pool of e has a ready pod.
func waitWarm(t testing.TB, e *Executor) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		e.poolsMu.Lock()
		ok := len(e.pools) > 0
		for _, p := range e.pools {
			p.mu.Lock()
			ok = ok && len(p.ready) >= e.opts.Warm
			p.mu.Unlock()
		}
		e.poolsMu.Unlock()
		if ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the warm pool did not fill within 30s")
}

// TestCallDataNotInAPI: a call's argv, env and stdin reach the command
// and appear nowhere in the API server: not in the pod, not in an event,
// not in the audit log (which records every pod request with its body).
func TestCallDataNotInAPI(t *testing.T) {
	e := newTestExecutor(t, 0)
	audit := os.Getenv(envAuditLog)
	if audit == "" {
		t.Fatalf("%s is unset", envAuditLog)
	}
	secretArg := "argv-" + randomHex(12)
	secretEnv := "env-" + randomHex(12)
	secretIn := "stdin-" + randomHex(12)
	req := request(t, testPolicy(t), "echo "+secretArg+" $SECRET_VALUE; cat")
	req.Env = []string{"SECRET_VALUE=" + secretEnv}
	req.Stdin = []byte(secretIn)
	res := run(t, e, req)
	if want := secretArg + " " + secretEnv + "\n" + secretIn; res.Stdout.Text != want {
		t.Fatalf("stdout = %q, want %q (stderr %q)", res.Stdout.Text, want, res.Stderr.Text)
	}
	pod := res.Sandbox.ContainerID
	// The audit backend writes asynchronously: wait until the pod's
	// deletion is in the log, which proves the log covers the call.
	var data []byte
	deadline := time.Now().Add(20 * time.Second)
	for {
		var err error
		data, err = os.ReadFile(audit)
		if err != nil {
			t.Fatalf("read audit log: %v", err)
		}
		if bytes.Contains(data, []byte(`"name":"`+pod+`"`)) && bytes.Contains(data, []byte(`"subresource":"attach"`)) &&
			bytes.Contains(data, []byte(`"verb":"delete"`)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit log has no create, attach and delete of pod %s", pod)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, s := range []string{secretArg, secretEnv, secretIn} {
		if bytes.Contains(data, []byte(s)) {
			t.Errorf("the audit log holds %q", s)
		}
	}
	evs, err := e.cli.CoreV1().Events(e.opts.Namespace).List(t.Context(), metavOpts())
	if err != nil {
		t.Fatalf("list events: %v", err)
	}
	for _, ev := range evs.Items {
		for _, s := range []string{secretArg, secretEnv, secretIn} {
			if strings.Contains(ev.Message, s) {
				t.Errorf("event %s holds %q", ev.Name, s)
			}
		}
	}
}

// TestAutoRootRefused: user auto resolving to uid 0 (a root-owned
// workspace) is refused, naming the fix; a workspace owned by another
// user runs as that user, with runAsNonRoot.
func TestAutoRootRefused(t *testing.T) {
	e := newTestExecutor(t, 0)
	p := testPolicy(t)
	p.User = sandbox.UserAuto
	req := request(t, p, "id -u")
	if _, err := e.Run(t.Context(), req); err == nil || !strings.Contains(err.Error(), "uid 0") {
		t.Fatalf("Run with a root-owned workspace = %v, want a refusal naming uid 0", err)
	}
	ws := filepath.Join(t.TempDir(), "ws")
	if err := os.Mkdir(ws, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	req = request(t, p, "id -u; touch made")
	req.Session.Cwd = ws
	res := run(t, e, req)
	if res.Stdout.Text != "4242\n" || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Fatalf("as the workspace's owner: stdout %q exit %v stderr %q", res.Stdout.Text, res.ExitCode, res.Stderr.Text)
	}
	if fi, err := os.Stat(filepath.Join(ws, "made")); err != nil {
		t.Errorf("made: %v", err)
	} else if uid := ownerOf(fi); uid != 4242 {
		t.Errorf("made is owned by %d, want 4242", uid)
	}
}

func metavOpts() metav1.ListOptions { return metav1.ListOptions{} }

func ownerOf(fi os.FileInfo) uint32 { return fi.Sys().(*syscall.Stat_t).Uid }
