package containerd

import (
	"context"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
)

var (
	_ backend.Reaper     = (*Executor)(nil)
	_ backend.ImageStore = (*Executor)(nil)
)

// Descriptor describes the containerd backend to the registry: containerd
// at Options.Address and Options.Namespace, its images, reaping, a doctor
// and the `ctr run --rm` bench baseline.
func Descriptor() backend.Descriptor {
	return backend.Descriptor{
		Name:  sandbox.BackendContainerd,
		Needs: backend.Needs{Daemon: &backend.Daemon{Binary: "containerd", Package: "containerd"}},
		Open: func(ctx context.Context, cfg backend.Config, _ sandbox.Runtime) (sandbox.Executor, error) {
			return backend.Opened(New(ctx, options(cfg)))
		},
		Reaps:  true,
		Images: backend.ImagesExecutor,
		Doctor: func(ctx context.Context, cfg backend.Config, _ sandbox.Runtime) []doctor.Check {
			return Doctor(ctx, options(cfg))
		},
		Bench: &backend.Bench{
			Baseline: "ctr run --rm",
			Image:    true,
			Run: func(ctx context.Context, cfg backend.Config, image string) (time.Duration, error) {
				o := options(cfg)
				return BenchCtrRun(ctx, o.Address, o.Namespace, image)
			},
		},
	}
}

// options are the backend's own Options in cfg with cfg's Service.
func options(cfg backend.Config) Options {
	o := backend.OwnOptions[Options](cfg)
	o.Service = cfg.Service
	return o
}
