package main

import (
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/containerd"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/docker"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/kubernetes"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/local"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/oci"
)

// backends are the backends this program ships, the default (oci, whose
// default runtime is runc) first. Adding a backend is its package plus
// one line here.
var backends = newBackends(
	oci.Descriptor(),
	docker.Descriptor(),
	containerd.Descriptor(),
	local.Descriptor(),
	kubernetes.Descriptor(),
)

// backendOptions are the settings of the backend name that come from
// the command's daemon flags (daemonflags.go), as that backend's own Options (backend.Config.Options);
// nil for a backend that has none.
func (s *settings) backendOptions(name sandbox.Backend) any {
	switch name {
	case sandbox.BackendDocker:
		return docker.Options{Host: s.dockerHost}
	case sandbox.BackendContainerd:
		return containerd.Options{Address: s.containerdAddress, Namespace: s.containerdNamespace}
	}
	return nil
}

func newBackends(ds ...backend.Descriptor) *backend.Registry {
	r := &backend.Registry{}
	for _, d := range ds {
		r.Register(d)
	}
	return r
}
