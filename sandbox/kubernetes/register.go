package kubernetes

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

var _ backend.Reaper = (*Executor)(nil)

// The environment the descriptor reads (docs/kubernetes.md): the cluster
// comes from KUBECONFIG (else ~/.kube/config, else the pod's service
// account when serve runs in the cluster).
const (
	EnvNamespace  = "DSH_SANDBOX_KUBE_NAMESPACE"
	EnvStub       = "DSH_SANDBOX_KUBE_STUB"
	EnvSeccompDir = "DSH_SANDBOX_KUBE_SECCOMP_DIR"
	EnvSeccomp    = "DSH_SANDBOX_KUBE_SECCOMP"
	EnvWarm       = "DSH_SANDBOX_KUBE_WARM"
	// EnvNode is Options.Node.
	EnvNode = "DSH_SANDBOX_KUBE_NODE"
	// EnvNodeContainerd is the node's containerd socket, on a
	// single-node cluster whose node is this host: bench imports its
	// image there (CRINamespace).
	EnvNodeContainerd = "DSH_SANDBOX_KUBE_NODE_CONTAINERD"
)

// Descriptor describes the kubernetes backend to the registry: the
// cluster of the kubeconfig, reaping by label and a doctor. Only a policy
// file or --backend kubernetes picks it.
func Descriptor() backend.Descriptor {
	return backend.Descriptor{
		Name: Backend,
		// The API server is this backend's daemon: serve warns at start
		// when it does not answer (its policies' calls fail until it
		// does) instead of refusing to start.
		Needs: backend.Needs{Daemon: &backend.Daemon{Binary: "kube-apiserver", Package: "none: scripts/kube.sh builds a test cluster"}},
		Open: func(ctx context.Context, cfg backend.Config, _ sandbox.Runtime) (sandbox.Executor, error) {
			opts, err := options(cfg)
			if err != nil {
				return nil, err
			}
			return backend.Opened(New(ctx, opts))
		},
		Reaps: true,
		Bench: &backend.Bench{
			Baseline: "pod run (API)",
			Image:    true,
			// As the oci backend's user auto resolves on a workspace of
			// root's, named: pods run without a user namespace.
			User: "0:0",
			Run: func(ctx context.Context, _ backend.Config, image string) (time.Duration, error) {
				return BenchPodRun(ctx, os.Getenv(EnvNamespace), image)
			},
		},
		Doctor: func(ctx context.Context, cfg backend.Config, _ sandbox.Runtime) []doctor.Check {
			opts, err := options(cfg)
			if err != nil {
				return []doctor.Check{{Name: "cluster", OK: false, Detail: err.Error()}}
			}
			return Doctor(ctx, opts)
		},
	}
}

// RESTConfig loads the cluster's address and credentials the way kubectl
// does: KUBECONFIG, else ~/.kube/config, else the in-cluster service
// account. No cluster is an ErrUnavailable error.
func RESTConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: no cluster configured (set KUBECONFIG; scripts/kube.sh starts a test cluster): %v", err)
	}
	return cfg, nil
}

// options reads the backend's settings from the environment.
func options(cfg backend.Config) (Options, error) {
	rc, err := RESTConfig()
	if err != nil {
		return Options{}, err
	}
	stubPath, err := stub.Locate(os.Getenv(EnvStub))
	if err != nil {
		return Options{}, sandbox.Errorf(sandbox.ErrUnavailable, "kubernetes: %v", err)
	}
	opts := Options{
		Config:     rc,
		Namespace:  os.Getenv(EnvNamespace),
		Service:    cfg.Service,
		Stub:       stubPath,
		SeccompDir: os.Getenv(EnvSeccompDir),
		Node:       os.Getenv(EnvNode),
	}
	if cfg.Pool != nil {
		// The warm pool asked for (serve --pool, bench's warm series):
		// as many pods per shape as it keeps slots per key.
		opts.Warm = max(cfg.Pool.PerKey, 1)
	}
	switch v := os.Getenv(EnvSeccomp); v {
	case "", "localhost":
	case "runtime-default":
		opts.RuntimeDefaultSeccomp = true
	default:
		return Options{}, sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: %s=%q: want localhost or runtime-default", EnvSeccomp, v)
	}
	if v := os.Getenv(EnvWarm); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || n > 1000 {
			return Options{}, sandbox.Errorf(sandbox.ErrInvalid, "kubernetes: %s=%q: want a number of pods from 0 to 1000", EnvWarm, v)
		}
		opts.Warm = n
	}
	return opts, nil
}

// String names the executor in logs.
func (e *Executor) String() string {
	return fmt.Sprintf("kubernetes executor %s (namespace %s)", e.instance, e.opts.Namespace)
}
