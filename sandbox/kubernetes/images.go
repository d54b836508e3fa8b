package kubernetes

import (
	"context"
	"time"

	"github.com/distribution/reference"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	k8s "k8s.io/client-go/kubernetes"

	dshimages "github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
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
	ref, err := reference.ParseNormalizedNamed(canon)
	if err != nil {
		return sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: image %q: %v", name, err)
	}
	if ref.String() != canon {
		return sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: image %q: the kubelet would look for %q, and an image imported into containerd is stored as %q: name it with a registry part, e.g. dsh-sandbox.local/%s", name, ref.String(), canon, canon)
	}
	return nil
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
