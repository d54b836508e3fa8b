//go:build tools

// Package kube only names the Kubernetes commands scripts/kube.sh builds, so
// that go.mod and go.sum pin everything they need. It is never compiled into
// dsh-sandbox.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
