package kubernetes

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestNodeImagesSharedRead: callers that arrive while the nodes' image
// lists are being read wait for that read instead of making their own,
// and one whose context ends meanwhile returns at once with its error.
func TestNodeImagesSharedRead(t *testing.T) {
	cs := fake.NewSimpleClientset(&corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1"},
		Status:     corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"dsh-sandbox.local/tools:1"}}}},
	})
	release := make(chan struct{})
	var lists atomic.Int32
	cs.PrependReactor("list", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		<-release
		return false, nil, nil // the tracker answers
	})
	e := &Executor{cli: cs}

	var wg sync.WaitGroup
	results := make([][]corev1.Node, 4)
	errs := make([]error, 4)
	call := func(i int) {
		defer wg.Done()
		results[i], errs[i] = e.nodeImages(context.Background())
	}
	wg.Add(1)
	go call(0)
	for deadline := time.Now().Add(10 * time.Second); lists.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first caller never listed the nodes")
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := e.nodeImages(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a waiter whose context ended: %v, want %v", err, context.DeadlineExceeded)
	}
	for i := 1; i < 4; i++ {
		wg.Add(1)
		go call(i)
	}
	time.Sleep(20 * time.Millisecond) // let them wait
	close(release)
	wg.Wait()
	for i := range results {
		if errs[i] != nil || len(results[i]) != 1 || results[i][0].Name != "n1" || len(results[i][0].Status.Images) != 1 {
			t.Errorf("caller %d: %v, %v; want node n1 with its image", i, results[i], errs[i])
		}
	}
	if n := lists.Load(); n != 1 {
		t.Errorf("node lists: %d, want 1 shared by every caller", n)
	}
	// Within the TTL the lists are reused without a read.
	if _, err := e.nodeImages(context.Background()); err != nil || lists.Load() != 1 {
		t.Errorf("a call within the TTL: %v, %d lists; want the cached lists", err, lists.Load())
	}
}
