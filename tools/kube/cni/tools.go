//go:build tools

// Package cni only names the CNI plugins scripts/kube.sh builds, so that
// go.mod and go.sum pin everything they need.
package cni

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
)
