package local

import (
	"context"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
)

// Descriptor describes the local backend to the registry: host processes,
// unconfined, so only a policy file may name it (Explicit); nothing to
// reap, no images, no doctor.
func Descriptor() backend.Descriptor {
	return backend.Descriptor{
		Name:     sandbox.BackendLocal,
		Explicit: true,
		Open: func(_ context.Context, cfg backend.Config, _ sandbox.Runtime) (sandbox.Executor, error) {
			return backend.Opened(New(Options{Service: cfg.Service}))
		},
	}
}
