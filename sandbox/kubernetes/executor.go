package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// Backend is the value of Policy.Backend this package runs.
const Backend = "kubernetes"

// DefaultNamespace is the namespace of the pods when Options.Namespace is
// empty.
const DefaultNamespace = "dsh-sandbox"

// StubTarget is where the stub is mounted in every pod.
const StubTarget = "/.dsh-sandbox-stub"

// containerName is the name of a pod's one container.
const containerName = "call"

// labelSlot marks a pod made by this backend with its slot id (the pod's
// name); reap.LabelOwner and LabelInstance mark it as ours.
const labelSlot = "dsh-sandbox.slot"

// startTimeout bounds how long a pod may take from creation to running.
const startTimeout = 60 * time.Second

// Options configure an Executor.
type Options struct {
	// Service is the state directory, logger, environment and kill
	// grace: instance lock files go to StateDir/kubernetes-instances,
	// spill files of calls without a session directory to
	// StateDir/spill. StateDir is required.
	driver.Service
	// Config is the API server's address and credentials. Required.
	Config *rest.Config
	// Namespace holds the pods; empty means DefaultNamespace. It must
	// exist.
	Namespace string
	// InstanceID names this executor in the pods' labels; empty means a
	// random "i-<hex>".
	InstanceID string
	// Stub is the host path of the static dsh-sandbox-stub binary on the
	// nodes, mounted read-only at StubTarget in every pod (a hostPath
	// volume). Required.
	Stub string
	// SeccompDir is the kubelet's seccomp directory (<root-dir>/seccomp)
	// on the node, as this process sees it: the policy's profile is
	// written there and the pods name it as a Localhost profile. Empty
	// refuses every call unless RuntimeDefaultSeccomp is set.
	SeccompDir string
	// RuntimeDefaultSeccomp runs calls under the container runtime's
	// default profile instead of the policy's, when SeccompDir is empty:
	// a weaker filter, chosen explicitly.
	RuntimeDefaultSeccomp bool
	// ImageEnv is the base environment of every image (layer 1 of DESIGN
	// §3.6): the cluster's API does not show an image's configuration.
	// Nil means PATH=images.DefaultPath.
	ImageEnv []string
	// Warm is how many pods each policy shape keeps ready ahead of its
	// calls, each attached and answering; 0 creates every call's pod on
	// demand.
	Warm int
	// Node, when set, places every pod on this node itself
	// (spec.nodeName): the scheduler is skipped, and with it a binding
	// and an event (two API writes) per pod and its share of a cold
	// start. The kubelet still refuses a pod that does not fit.
	Node string
}

// Executor runs calls in pods of a Kubernetes cluster. It is safe for
// concurrent use; Close deletes its warm pods.
type Executor struct {
	opts     Options
	cfg      *rest.Config
	cli      k8s.Interface
	instance string
	lock     *os.File
	active   reap.ActiveCalls
	seccomp  *seccompProfile

	gate driver.Gate // held by every running call; closed by Close

	poolsMu sync.Mutex
	pools   map[string]*warmPool

	// nodes are the nodes' image lists podImage last read, at nodesAt;
	// nodesReading is closed when the read running now ends.
	nodesMu      sync.Mutex
	nodesAt      time.Time
	nodes        []corev1.Node
	nodesReading chan struct{}

	deleting sync.WaitGroup // deleteLater's deletions in flight
}

// quietClientGo silences client-go's own logging once per process.
var quietClientGo sync.Once

var instanceRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// New checks opts, connects to the API server and locks the executor's
// instance. Errors wrap sandbox.ErrInvalid (bad options) or
// sandbox.ErrUnavailable (the cluster cannot be reached).
func New(ctx context.Context, opts Options) (*Executor, error) {
	if err := checkOptions(opts); err != nil {
		return nil, err
	}
	opts = withDefaults(opts)
	if !instanceRE.MatchString(opts.InstanceID) {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: InstanceID %q: want 1-63 characters of [A-Za-z0-9_.-] starting with a letter or digit", opts.InstanceID)
	}
	if fi, err := os.Stat(opts.Stub); err != nil || !fi.Mode().IsRegular() {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: stub %q: not a regular file (build it with CGO_ENABLED=0 go build ./cmd/dsh-sandbox-stub)", opts.Stub)
	}
	cfg, cli, err := newClient(opts.Config)
	if err != nil {
		return nil, err
	}
	if err := checkCluster(ctx, cli, opts); err != nil {
		return nil, err
	}
	lock, err := reap.LockInstance(instancesDir(opts.StateDir), opts.InstanceID)
	if err != nil {
		return nil, err
	}
	e := &Executor{
		opts: opts, cfg: cfg, cli: cli, instance: opts.InstanceID, lock: lock,
		pools: map[string]*warmPool{},
	}
	if opts.SeccompDir != "" {
		e.seccomp = &seccompProfile{dir: opts.SeccompDir}
	}
	return e, nil
}

// checkOptions refuses options New cannot run with, before any default
// is filled in.
func checkOptions(opts Options) error {
	switch {
	case opts.Config == nil:
		return sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: no cluster configured (set KUBECONFIG)")
	case !filepath.IsAbs(opts.StateDir):
		return sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: state directory %q is not absolute", opts.StateDir)
	case !filepath.IsAbs(opts.Stub):
		return sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: stub %q is not an absolute path (build it with CGO_ENABLED=0 go build ./cmd/dsh-sandbox-stub)", opts.Stub)
	case opts.SeccompDir != "" && !filepath.IsAbs(opts.SeccompDir):
		return sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: seccomp directory %q is not absolute", opts.SeccompDir)
	case opts.Node != "" && len(validation.IsDNS1123Subdomain(opts.Node)) > 0:
		return sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: node %q is not a node name (%s)", opts.Node, strings.Join(validation.IsDNS1123Subdomain(opts.Node), "; "))
	case opts.Warm < 0:
		return sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: warm %d is negative", opts.Warm)
	}
	return nil
}

// withDefaults returns opts with the documented default in each empty
// field that has one, a random instance id included.
func withDefaults(opts Options) Options {
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if opts.ImageEnv == nil {
		opts.ImageEnv = []string{"PATH=" + images.DefaultPath}
	}
	if opts.InstanceID == "" {
		opts.InstanceID = "i-" + randomHex(6)
	}
	opts.Service = opts.Service.WithDefaults("backend", Backend, "instance", opts.InstanceID)
	return opts
}

// newClient returns the executor's copy of config and a client of the
// API server made with it, with client-go's own logging silenced.
func newClient(config *rest.Config) (*rest.Config, k8s.Interface, error) {
	quietClientGo.Do(func() {
		// client-go reports through klog on the process's stderr, which
		// is the command's stderr under `dsh-sandbox exec`: e.g. "Copying
		// stdin failed" when a call's attach stream closes as it ends.
		// Everything that matters to a call reaches it as an error.
		klog.SetLogger(logr.Discard())
	})
	cfg := rest.CopyConfig(config)
	cfg.UserAgent = "dsh-sandbox"
	// A call makes few requests, but many calls run at once.
	cfg.QPS, cfg.Burst = 200, 400
	cli, err := k8s.NewForConfig(cfg)
	if err != nil {
		return nil, nil, sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: client: %v", err)
	}
	return cfg, cli, nil
}

// checkCluster asks the API server whether the namespace of opts exists
// and, if opts names a node, whether the cluster has it.
func checkCluster(ctx context.Context, cli k8s.Interface, opts Options) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.CoreV1().Namespaces().Get(pctx, opts.Namespace, metav1.GetOptions{}); err != nil {
		return classify(err, "namespace %q", opts.Namespace)
	}
	if opts.Node != "" {
		if _, err := cli.CoreV1().Nodes().Get(pctx, opts.Node, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: node %q: the cluster has no such node", opts.Node)
		} else if err != nil {
			return classify(err, "node %q", opts.Node)
		}
	}
	return nil
}

func instancesDir(stateDir string) string { return filepath.Join(stateDir, "kubernetes-instances") }

// Instance returns the executor's instance id.
func (e *Executor) Instance() string { return e.instance }

// Pooled says whether the executor keeps warm pods (Options.Warm).
func (e *Executor) Pooled() bool { return e.opts.Warm > 0 }

// WarmPods returns how many warm pods, attached and answering, wait for
// a call, over every shape.
func (e *Executor) WarmPods() int {
	e.poolsMu.Lock()
	defer e.poolsMu.Unlock()
	n := 0
	for _, p := range e.pools {
		p.mu.Lock()
		n += len(p.ready)
		p.mu.Unlock()
	}
	return n
}

// Namespace returns the namespace of the executor's pods.
func (e *Executor) Namespace() string { return e.opts.Namespace }

// Close deletes the executor's warm pods and releases its instance; calls
// still running finish first.
func (e *Executor) Close() error { return e.gate.Close(e.release) }

// release is Close once the calls ended.
func (e *Executor) release() error {
	var errs []error
	e.poolsMu.Lock()
	pools := e.pools
	e.pools = map[string]*warmPool{}
	e.poolsMu.Unlock()
	for _, p := range pools {
		errs = append(errs, p.close())
	}
	e.settle()
	ctx, cancel := context.WithTimeout(context.Background(), driver.TeardownTimeout)
	defer cancel()
	// Whatever of this instance is left (a warm pod whose creation raced
	// the close) goes too.
	if err := e.deletePods(ctx, labels.Set{reap.LabelOwner: reap.LabelOwnerValue, reap.LabelInstance: e.instance}); err != nil {
		errs = append(errs, err)
	}
	e.lock.Close()
	_ = os.Remove(filepath.Join(instancesDir(e.opts.StateDir), e.instance+".lock"))
	return errors.Join(errs...)
}

// Run executes req in a pod of its own; see sandbox.Executor. A cluster
// that cannot be reached, or that loses the pod during the call, gives
// sandbox.ErrUnavailable, never a made-up exit status.
func (e *Executor) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	return driver.RunGated(ctx, &e.gate, (*runner)(e), req)
}

// runner is the Executor as driver.Run sees it.
type runner Executor

func (r *runner) Profile() driver.Profile {
	return driver.Profile{
		Name:     Backend,
		Service:  r.opts.Service,
		Instance: r.instance,
		Reap:     "dsh-sandbox reap --backend kubernetes",
	}
}

// Resolve checks what the cluster can run of req's policy and builds the
// pod's shape.
func (r *runner) Resolve(ctx context.Context, req *sandbox.Request) (driver.Resolution, *podShape, error) {
	e := (*Executor)(r)
	if err := driver.ImportedImage(Backend, req.Policy.Image); err != nil {
		return driver.Resolution{}, nil, err
	}
	if req.Terminal != nil {
		return driver.Resolution{}, nil, sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: a terminal (exec -t) is not supported on this backend")
	}
	if req.Policy.Network == policy.NetworkAllowlist {
		return driver.Resolution{}, nil, sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: policy.network %q is not supported on this backend: its egress proxy runs in the call's network namespace, which a pod does not share with the service; use network none", req.Policy.Network)
	}
	uid, gid, err := policy.ResolveUser(req.Policy, req.Session)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	if uid == 0 && req.Policy.User.Auto() {
		return driver.Resolution{}, nil, sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: policy.user auto resolves to uid 0 (the workspace's owner), and pods run without a user namespace here (hostUsers: false needs a container runtime that supports it): name a non-root user, e.g. user: \"1000:1000\", or uid 0 explicitly (\"0:0\")")
	}
	plan, err := policy.Plan(req.Policy, req.Session, policy.Identity{UID: uid, GID: gid})
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	seccomp, err := e.seccompFor(req.Policy)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	runtimeClass, err := e.runtimeClass(ctx, req.Policy.Runtime)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	image, digest, err := e.podImage(ctx, req.Policy.Image)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	shape, err := newPodShape(req.Policy, image, plan, uid, gid, e.opts.Stub, seccomp, runtimeClass)
	if err != nil {
		return driver.Resolution{}, nil, err
	}
	return driver.Resolution{
		ImageEnv: e.opts.ImageEnv,
		PathUID:  uid,
		Info: sandbox.Info{
			Backend: Backend,
			Runtime: string(req.Policy.Runtime),
			Image:   req.Policy.Image,
			// The digest the pod spec names, resolved once above.
			ImageDigest: digest,
			Policy:      req.Policy.Name,
		},
	}, shape, nil
}

// runtimeClass returns the RuntimeClass a policy's runtime needs: none
// for runc (the cluster's default handler), else a RuntimeClass of the
// runtime's name, which must exist.
func (e *Executor) runtimeClass(ctx context.Context, rt sandbox.Runtime) (string, error) {
	if rt == "" || rt == sandbox.RuntimeRunc {
		return "", nil
	}
	if _, err := e.cli.NodeV1().RuntimeClasses().Get(ctx, string(rt), metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return "", sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: policy.runtime %q needs a RuntimeClass %q in the cluster, and there is none (for runsc: gVisor's containerd shim on the nodes and a RuntimeClass with handler runsc)", rt, rt)
		}
		return "", classify(err, "RuntimeClass %q", rt)
	}
	return string(rt), nil
}

// Prepare takes a warm pod of the call's shape, or creates one and waits
// until it runs; the pod's deletion goes onto the call's cleanup stack.
func (r *runner) Prepare(ctx context.Context, call *driver.Running, shape *podShape) (driver.Slot, error) {
	e := (*Executor)(r)
	if !e.active.Add(call.ID) {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: callId %q is already running on this executor", call.ID)
	}
	call.Cleanup.Add("active call", func(context.Context) error {
		e.active.Remove(call.ID)
		return nil
	})
	bg := context.WithoutCancel(ctx)
	if e.opts.Warm > 0 {
		pool := e.pool(shape)
		if p, ok := pool.take(); ok {
			call.Result.Timings.Pool = sandbox.PoolHit
			call.Cleanup.Add("pod", func(context.Context) error { e.deleteLater(p.name); return nil })
			call.Log.Debug("warm pod", "pod", p.name)
			return &podContainer{call: call, p: p}, nil
		}
		call.Result.Timings.Pool = sandbox.PoolMiss
		call.Log.Debug("no warm pod: creating one")
	}
	name := podName()
	pod := e.newPod(shape, name, shape.deadline(call.Timeout, e.opts.KillGrace))
	// Deleted on every path, also when the create failed halfway.
	call.Cleanup.Add("pod", func(context.Context) error { e.deleteLater(name); return nil })
	if err := e.createAndWait(ctx, bg, pod); err != nil {
		return nil, err
	}
	p, err := e.attach(ctx, name)
	if err != nil {
		return nil, err
	}
	return &podContainer{call: call, p: p}, nil
}

// newPod is the pod of shape called name, on Options.Node if set.
func (e *Executor) newPod(shape *podShape, name string, deadlineSeconds int64) *corev1.Pod {
	pod := shape.pod(name, e.opts.Namespace, e.instance, deadlineSeconds)
	pod.Spec.NodeName = e.opts.Node
	return pod
}

// deleteLater deletes pod name off the call's path: its call has ended
// and the stub with it (the stub is the pod's first process: the kernel
// killed whatever the call left running), so what remains is an API
// object. Close waits for the deletions in flight; one that fails is
// logged, and `dsh-sandbox reap` finds the pod by its labels.
func (e *Executor) deleteLater(name string) {
	e.deleting.Add(1)
	go func() {
		defer e.deleting.Done()
		ctx, cancel := context.WithTimeout(context.Background(), driver.TeardownTimeout)
		defer cancel()
		if err := e.deletePod(ctx, name); err != nil {
			e.opts.Logger.Error("pod not deleted; `dsh-sandbox reap --backend kubernetes` removes it", "error", err, "pod", name)
		}
	}()
}

// settle waits until the deletions deleteLater started are done.
func (e *Executor) settle() { e.deleting.Wait() }

// createAndWait creates pod and waits until its container runs. The
// watch starts at the resource version the create returned, so it sees
// every later change, and the API server serves it from its watch cache
// (a watch from "now" needs a consistent read, which etcd before 3.5
// cannot give the cache: it then stalls until the cache sees a newer
// event).
func (e *Executor) createAndWait(ctx, bg context.Context, pod *corev1.Pod) error {
	pods := e.cli.CoreV1().Pods(pod.Namespace)
	wctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	created, err := pods.Create(bg, pod, metav1.CreateOptions{})
	if err != nil {
		return classify(err, "create pod %s", pod.Name)
	}
	w, err := pods.Watch(wctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", pod.Name).String(),
		ResourceVersion: created.ResourceVersion,
	})
	if err != nil {
		if ctx.Err() != nil {
			return sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: pod %s not started: %w", pod.Name, context.Cause(ctx))
		}
		return classify(err, "watch pod %s", pod.Name)
	}
	defer w.Stop()
	for {
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: pod %s not started: %w", pod.Name, context.Cause(ctx))
			}
			return sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: pod %s did not start within %v", pod.Name, startTimeout)
		case ev, ok := <-w.ResultChan():
			if !ok {
				return sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: pod %s: the watch ended before it ran", pod.Name)
			}
			switch ev.Type {
			case watch.Error:
				return sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: pod %s: watch: %v", pod.Name, apierrors.FromObject(ev.Object))
			case watch.Deleted:
				return sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: pod %s was deleted before it ran", pod.Name)
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			if done, err := podRunning(p); done || err != nil {
				return err
			}
		}
	}
}

// podRunning says whether p's container runs (true, nil), can never run
// (an error naming why) or may still come up (false, nil).
func podRunning(p *corev1.Pod) (bool, error) {
	switch p.Status.Phase {
	case corev1.PodSucceeded, corev1.PodFailed:
		return false, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: pod %s ended before its call (%s: %s)", p.Name, p.Status.Reason, p.Status.Message)
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != containerName {
			continue
		}
		if cs.State.Running != nil {
			return true, nil
		}
		if t := cs.State.Terminated; t != nil {
			return false, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: pod %s: its container ended before its call (%s, exit %d)", p.Name, t.Reason, t.ExitCode)
		}
		if wt := cs.State.Waiting; wt != nil {
			switch wt.Reason {
			case "ErrImageNeverPull", "InvalidImageName", "CreateContainerConfigError", "CreateContainerError", "RunContainerError":
				return false, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: pod %s cannot start: %s: %s", p.Name, wt.Reason, wt.Message)
			}
		}
	}
	// Pending (also unschedulable: the scheduler may still find room):
	// the start timeout decides.
	return false, nil
}

// deletePod deletes the pod at once (grace period 0): its call has
// ended, the stub with it.
func (e *Executor) deletePod(ctx context.Context, name string) error {
	zero := int64(0)
	err := e.cli.CoreV1().Pods(e.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("pod %s: %w", name, err)
	}
	return nil
}

// deletePods deletes every pod of the namespace that sel matches.
func (e *Executor) deletePods(ctx context.Context, sel labels.Set) error {
	zero := int64(0)
	err := e.cli.CoreV1().Pods(e.opts.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero},
		metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil && !apierrors.IsNotFound(err) {
		return classify(err, "delete pods")
	}
	return nil
}

// Pods lists the names of this executor's pods (warm ones included).
func (e *Executor) Pods(ctx context.Context) ([]string, error) {
	l, err := e.cli.CoreV1().Pods(e.opts.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{reap.LabelOwner: reap.LabelOwnerValue, reap.LabelInstance: e.instance}.String(),
	})
	if err != nil {
		return nil, classify(err, "list pods")
	}
	var out []string
	for _, p := range l.Items {
		out = append(out, p.Name)
	}
	return out, nil
}

// podName is a fresh pod name: the call is not known yet when a warm pod
// is made, and its id is not the API's business.
func podName() string { return "dsh-sandbox-" + randomHex(8) }

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// classify wraps an API error: a cluster that cannot be reached or
// refuses us is ErrUnavailable, a request it finds invalid ErrInvalid.
func classify(err error, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	switch {
	case apierrors.IsInvalid(err), apierrors.IsBadRequest(err):
		return sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: %s: %w", msg, err)
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: %s: %w (see contrib/kubernetes/rbac.yaml for the permissions the backend needs)", msg, err)
	}
	return sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: %s: %w", msg, err)
}
