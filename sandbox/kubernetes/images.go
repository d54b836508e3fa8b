package kubernetes

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"

	dshimages "github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/containerd"
)

// criNamespace is the containerd namespace of the images a kubelet runs.
const criNamespace = "k8s.io"

// nodeImages opens the node's containerd (Options.NodeContainerd), in
// the kubelet's namespace, for the images commands: the cluster's API
// cannot import an image. Without it they fail, naming the setting.
func (e *Executor) nodeImages(ctx context.Context) (*containerd.Executor, error) {
	if e.opts.NodeContainerd == "" {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: images live in the nodes' container runtime, which the cluster's API cannot import into: "+
			"on a single-node cluster set %s to the node's containerd socket; else import on every node (ctr -n %s images import)", EnvNodeContainerd, criNamespace)
	}
	dir := filepath.Join(e.opts.StateDir, "kubernetes-images")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: %v", err)
	}
	return containerd.New(ctx, containerd.Options{Address: e.opts.NodeContainerd, Namespace: criNamespace, StateDir: dir, Logger: e.log})
}

// kubeletName checks that the kubelet can find image name in the node's
// containerd, where it is stored under its canonical name: a kubelet
// looks an image up by its fully qualified reference, which for a Docker
// Hub name ("tools:1", stored as such) is docker.io/library/tools:1.
func kubeletName(name string) error {
	canon, err := dshimages.CanonicalName(name)
	if err != nil {
		return sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: image %q: %v", name, err)
	}
	ref, err := reference.ParseNormalizedNamed(canon)
	if err != nil {
		return sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: image %q: %v", name, err)
	}
	if ref.String() != canon {
		return sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: image %q: the kubelet would look for %q, and an image imported into containerd is stored as %q: name it with a registry part, e.g. dsh-sandbox.local/%s", name, ref.String(), canon, canon)
	}
	return nil
}

// ImportRootfs imports a root-filesystem tarball as image name into the
// node's containerd (Options.NodeContainerd); a name the kubelet would
// not find there is refused (kubeletName).
func (e *Executor) ImportRootfs(ctx context.Context, r io.Reader, name string, env []string) error {
	if err := kubeletName(name); err != nil {
		return err
	}
	ce, err := e.nodeImages(ctx)
	if err != nil {
		return err
	}
	defer ce.Close()
	return ce.ImportRootfs(ctx, r, name, env)
}

// Images lists the images dsh-sandbox imported into the node's
// containerd.
func (e *Executor) Images(ctx context.Context) ([]dshimages.Image, error) {
	ce, err := e.nodeImages(ctx)
	if err != nil {
		return nil, err
	}
	defer ce.Close()
	return ce.Images(ctx)
}

// RemoveImage removes an image dsh-sandbox imported from the node's
// containerd.
//
// The kubelet removes a deleted pod's container shortly after the pod:
// while one still uses the image, containerd refuses
// (sandbox.ErrUnavailable), and RemoveImage tries again, for at most
// imageRemoveWait.
func (e *Executor) RemoveImage(ctx context.Context, name string) (string, error) {
	ce, err := e.nodeImages(ctx)
	if err != nil {
		return "", err
	}
	defer ce.Close()
	e.settle()
	giveUp := time.Now().Add(imageRemoveWait)
	for {
		canon, err := ce.RemoveImage(ctx, name)
		if !errors.Is(err, sandbox.ErrUnavailable) || time.Now().After(giveUp) {
			return canon, err
		}
		select {
		case <-ctx.Done():
			return canon, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// imageRemoveWait bounds how long RemoveImage waits for the kubelet to
// remove the containers of deleted pods.
const imageRemoveWait = 60 * time.Second

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
			Labels: map[string]string{sandbox.LabelOwner: sandbox.LabelOwnerValue}},
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
