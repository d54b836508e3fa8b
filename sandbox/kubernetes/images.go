package kubernetes

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"

	dshimages "github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// CRINamespace is the containerd namespace of the images a kubelet runs.
const CRINamespace = "k8s.io"

// KubeletName checks that a kubelet can find image name in a node's
// containerd when dsh-sandbox imports it there, where it is stored under
// its canonical name: a kubelet looks an image up by its fully qualified
// reference, which for a Docker Hub name ("tools:1", stored as such) is
// docker.io/library/tools:1.
func KubeletName(name string) error {
	canon, err := dshimages.CanonicalName(name)
	if err != nil {
		return sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: image %q: %v", name, err)
	}
	_, err = kubeletReference(name, canon)
	return err
}

// kubeletReference checks that canon, the canonical form of the image
// reference name, is the reference a kubelet looks up, and returns it
// parsed.
func kubeletReference(name, canon string) (reference.Named, error) {
	ref, err := reference.ParseNormalizedNamed(canon)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: image %q: %v", name, err)
	}
	if ref.String() != canon {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: image %q: the kubelet would look for %q, and an image imported into containerd is stored as %q: name it with a registry part, e.g. dsh-sandbox.local/%s", name, ref.String(), canon, canon)
	}
	return ref, nil
}

// podImage resolves the policy's image to the reference the pod spec
// names, once per call, and the digest the call runs: a digest
// reference ("repository@sha256:…") as it is; a tag as
// repository@sha256:… when the nodes' image lists (node status, which
// the kubelet keeps) show a digest of the repository on the image of
// that tag, as for an image pulled into the nodes' container runtime
// (`images pull --backend containerd` into namespace k8s.io); the lists
// are at most nodeImagesTTL older than the kubelet's. Nodes that
// disagree on the tag's digest refuse the call. A tag the nodes know by
// no digest (an image imported by name) stays a tag, with no digest.
func (e *Executor) podImage(ctx context.Context, name string) (image, digest string, err error) {
	canon, err := dshimages.CanonicalReference(name)
	if err != nil {
		return "", "", sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: policy.image: %v", err)
	}
	ref, err := kubeletReference(name, canon)
	if err != nil {
		return "", "", err
	}
	if _, d, pinned := strings.Cut(canon, "@"); pinned {
		return canon, d, nil
	}
	nodes, err := e.nodeImages(ctx)
	if err != nil {
		return "", "", classify(err, "policy.image %q: the nodes' image lists", name)
	}
	return nodeDigest(name, canon, reference.TrimNamed(ref).String(), nodes)
}

// nodeImagesTTL is how long podImage reuses the nodes' image lists: the
// kubelet refreshes them no faster, and a call then costs no read of
// every node's status.
const nodeImagesTTL = 10 * time.Second

// nodeImages returns the name and status.images of the nodes pods may
// run on (Options.Node alone when set), read at most once per
// nodeImagesTTL. Concurrent callers share one read; a caller whose ctx
// ends while it waits for another's returns ctx's error.
func (e *Executor) nodeImages(ctx context.Context) ([]corev1.Node, error) {
	for {
		e.nodesMu.Lock()
		if e.nodes != nil && time.Since(e.nodesAt) < nodeImagesTTL {
			nodes := e.nodes
			e.nodesMu.Unlock()
			return nodes, nil
		}
		if reading := e.nodesReading; reading != nil {
			e.nodesMu.Unlock()
			select {
			case <-reading:
				continue // read, or failed: then this caller tries
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		done := make(chan struct{})
		e.nodesReading = done
		e.nodesMu.Unlock()
		nodes, err := e.readNodeImages(ctx)
		e.nodesMu.Lock()
		if err == nil {
			e.nodes, e.nodesAt = nodes, time.Now()
		}
		e.nodesReading = nil
		close(done)
		e.nodesMu.Unlock()
		return nodes, err
	}
}

// readNodeImages reads the nodes' names and image lists from the API.
func (e *Executor) readNodeImages(ctx context.Context) ([]corev1.Node, error) {
	var items []corev1.Node
	if e.opts.Node != "" {
		n, err := e.cli.CoreV1().Nodes().Get(ctx, e.opts.Node, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		items = []corev1.Node{*n}
	} else {
		l, err := e.cli.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		items = l.Items
	}
	nodes := make([]corev1.Node, len(items))
	for i, n := range items {
		nodes[i].Name, nodes[i].Status.Images = n.Name, n.Status.Images
	}
	return nodes, nil
}

// nodeDigest is podImage's answer for the tag canon (policy.image name)
// of repository repo from the image lists of nodes.
func nodeDigest(name, canon, repo string, nodes []corev1.Node) (image, digest string, err error) {
	found := map[string][]string{} // digest: nodes
	for _, n := range nodes {
		for _, img := range n.Status.Images {
			if !slices.Contains(img.Names, canon) {
				continue
			}
			for _, in := range img.Names {
				if d, ok := strings.CutPrefix(in, repo+"@"); ok && !slices.Contains(found[d], n.Name) {
					found[d] = append(found[d], n.Name)
				}
			}
		}
	}
	switch len(found) {
	case 0:
		return canon, "", nil
	case 1:
		for d := range found {
			return repo + "@" + d, d, nil
		}
	}
	var parts []string
	for d, ns := range found {
		parts = append(parts, d+" on "+strings.Join(ns, ", "))
	}
	slices.Sort(parts)
	return "", "", sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: policy.image %q names different images on the nodes (%s): name one by digest (%s@sha256:…), or make the nodes agree", name, strings.Join(parts, "; "), repo)
}

// BenchPodRun is bench's baseline of this backend: a pod running true on
// image (on the nodes already), created, watched until it succeeded and
// deleted, through the API alone — what a pod costs without the stub,
// the warm pool, policy or output capture.
func BenchPodRun(ctx context.Context, namespace, image string) (time.Duration, error) {
	cfg, err := RESTConfig()
	if err != nil {
		return 0, err
	}
	cli, err := k8s.NewForConfig(cfg)
	if err != nil {
		return 0, sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: bench: client: %v", err)
	}
	if namespace == "" {
		namespace = DefaultNamespace
	}
	image, err = dshimages.CanonicalName(image)
	if err != nil {
		return 0, sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: bench: image: %v", err)
	}
	no := false
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "dsh-sandbox-bench-" + randomHex(6), Namespace: namespace,
			Labels: map[string]string{reap.LabelOwner: reap.LabelOwnerValue}},
		Spec: corev1.PodSpec{
			ActiveDeadlineSeconds:        ptr(int64(startTimeout / time.Second)),
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: &no,
			EnableServiceLinks:           &no,
			DNSPolicy:                    corev1.DNSDefault,
			Containers:                   []corev1.Container{{Name: containerName, Image: image, ImagePullPolicy: corev1.PullNever, Command: []string{"true"}}},
		},
	}
	pods := cli.CoreV1().Pods(namespace)
	t := time.Now()
	created, err := pods.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return 0, classify(err, "bench: create pod")
	}
	zero := int64(0)
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = pods.Delete(dctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}()
	wctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	w, err := pods.Watch(wctx, metav1.ListOptions{
		FieldSelector:   fields.OneTermEqualSelector("metadata.name", pod.Name).String(),
		ResourceVersion: created.ResourceVersion,
	})
	if err != nil {
		return 0, classify(err, "bench: watch pod")
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if ev.Type == watch.Error || ev.Type == watch.Deleted || !ok {
			break
		}
		done := p.Status.Phase == corev1.PodSucceeded
		for _, cs := range p.Status.ContainerStatuses {
			if t := cs.State.Terminated; t != nil && t.ExitCode == 0 {
				done = true
			}
		}
		if done {
			err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
			if err != nil {
				return 0, classify(err, "bench: delete pod")
			}
			return time.Since(t), nil
		}
		if _, err := podRunning(p); err != nil {
			return 0, err
		}
	}
	return 0, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: bench: pod %s did not succeed within %v", pod.Name, startTimeout)
}
