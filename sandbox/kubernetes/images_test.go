package kubernetes

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/distribution/reference"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/containerd"
)

// pullIntoNode pulls tag from reg into the cluster node's containerd
// (namespace k8s.io, the kubelet's) with the containerd backend, as
// `images pull --backend containerd` does on a node, and removes it when
// t ends.
func pullIntoNode(t *testing.T, reg *fixtures.Registry, tag string) *images.Image {
	t.Helper()
	state := t.TempDir()
	ce, err := containerd.New(t.Context(), containerd.Options{Address: os.Getenv(envContainerd), Namespace: CRINamespace, StateDir: state})
	if err != nil {
		t.Fatalf("containerd.New(%s) = %v", envContainerd, err)
	}
	regs, err := images.LoadRegistries("", []string{reg.Host})
	if err != nil {
		t.Fatal(err)
	}
	img, err := ce.PullImage(t.Context(), tag, images.PullOptions{Registries: regs})
	if err != nil {
		ce.Close()
		t.Fatalf("pull %s into the node: %v", tag, err)
	}
	t.Cleanup(func() {
		defer ce.Close()
		// The kubelet removes the containers of deleted pods in the
		// background; until then the image is in use.
		deadline := time.Now().Add(2 * time.Minute)
		for _, n := range []string{tag, pinnedName(tag, img.Digest)} {
			for {
				_, err := ce.RemoveImage(context.Background(), n)
				if err == nil || errors.Is(err, images.ErrNotFound) {
					break
				}
				if time.Now().After(deadline) || !strings.Contains(err.Error(), "in use") {
					t.Errorf("remove %s from the node: %v", n, err)
					break
				}
				time.Sleep(time.Second)
			}
		}
	})
	return img
}

// pinnedName is tag's repository with digest.
func pinnedName(tag, digest string) string {
	ref, err := reference.ParseNormalizedNamed(tag)
	if err != nil {
		panic(fmt.Sprintf("pinnedName(%q): %v", tag, err))
	}
	return reference.TrimNamed(ref).String() + "@" + digest
}

// TestPodImageByDigest: an image pulled into the node runs in pods that
// name it by digest, whether the policy names it by tag (resolved once
// from the node's image list) or by digest, and the result names the
// digest; a digest the node lacks is refused before anything runs. An
// image imported by name, which the node knows by no digest, runs by
// name.
func TestPodImageByDigest(t *testing.T) {
	requireCluster(t)
	e := newTestExecutor(t, 0)
	var tar bytes.Buffer
	if err := images.BusyboxWith(&tar, "bash"); err != nil {
		t.Fatalf("busybox test image (install busybox-static and bash): %v", err)
	}
	marker, err := fixtures.TestImage(t, map[string]string{"etc/": "", "etc/pulled": "from the registry\n"}).Layers()
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(fixtures.ImageFromTar(t, tar.Bytes(), testImageEnv...), marker...)
	if err != nil {
		t.Fatal(err)
	}
	reg := fixtures.StartRegistry(t)
	tag := reg.Ref("kube-pulled:1")
	digest := reg.Push(t, tag, img)
	pinned := pinnedName(tag, digest)
	if got := pullIntoNode(t, reg, tag); got.Digest != digest {
		t.Fatalf("pulled %+v, want digest %s", got, digest)
	}

	// The kubelet reports the node's images in the node's status.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		nodes, err := e.cli.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		listed := slices.ContainsFunc(nodes.Items, func(n corev1.Node) bool {
			return slices.ContainsFunc(n.Status.Images, func(i corev1.ContainerImage) bool { return slices.Contains(i.Names, pinned) })
		})
		if listed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no node's status lists %s after 3 minutes", pinned)
		}
		time.Sleep(time.Second)
	}

	for _, name := range []string{tag, pinned} {
		p := testPolicy(t)
		p.Image = name
		r := (*runner)(e)
		req := request(t, p, "cat /etc/pulled")
		target, shape, err := r.Resolve(t.Context(), req)
		if err != nil {
			t.Fatalf("Resolve(%s) = %v", name, err)
		}
		if got := shape.spec.Containers[0].Image; got != pinned || target.Info.ImageDigest != digest {
			t.Errorf("policy.image %s: pod spec names %q, result digest %q; want %s and %s", name, got, target.Info.ImageDigest, pinned, digest)
		}
		res, err := e.Run(t.Context(), req)
		if err != nil || res.ExitCode == nil || *res.ExitCode != 0 || res.Stdout.Text != "from the registry\n" {
			t.Fatalf("run on %s: %+v, %v; want the pulled image's /etc/pulled", name, res, err)
		}
		if res.Sandbox.Image != name || res.Sandbox.ImageDigest != digest {
			t.Errorf("result names image %q digest %q, want %s and %s", res.Sandbox.Image, res.Sandbox.ImageDigest, name, digest)
		}
	}

	// A digest the node does not have: the pod never starts its
	// container, so nothing runs.
	p := testPolicy(t)
	p.Image = pinnedName(tag, "sha256:"+strings.Repeat("e", 64))
	res, err := e.Run(t.Context(), request(t, p, "true"))
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "ErrImageNeverPull") || !strings.Contains(err.Error(), p.Image) {
		t.Errorf("run on a digest the node lacks: %+v, %v; want ErrImageNeverPull naming %s", res, err, p.Image)
	}

	// The imported test image has no digest on the node: it runs by name.
	p = testPolicy(t)
	_, shape, err := (*runner)(e).Resolve(t.Context(), request(t, p, "true"))
	if err != nil || shape.spec.Containers[0].Image != testImage {
		t.Errorf("imported image: %v, pod spec names %q; want %s", err, shape.spec.Containers[0].Image, testImage)
	}
}
