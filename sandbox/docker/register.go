package docker

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

// Descriptor describes the docker backend to the registry: the Docker
// engine at Options.Host (the engine picks the OCI runtime a policy
// names), its images, reaping, a doctor and the `docker run --rm` bench
// baseline.
func Descriptor() backend.Descriptor {
	return backend.Descriptor{
		Name:  sandbox.BackendDocker,
		Needs: backend.Needs{Daemon: &backend.Daemon{Binary: "dockerd", Package: "docker.io"}},
		Open: func(ctx context.Context, cfg backend.Config, _ sandbox.Runtime) (sandbox.Executor, error) {
			return backend.Opened(New(ctx, options(cfg)))
		},
		Reaps:  true,
		Images: backend.ImagesExecutor,
		Doctor: func(ctx context.Context, cfg backend.Config, _ sandbox.Runtime) []doctor.Check {
			return Doctor(ctx, options(cfg))
		},
		Bench: &backend.Bench{
			Baseline: "docker run --rm",
			Image:    true,
			Run: func(ctx context.Context, cfg backend.Config, image string) (time.Duration, error) {
				return BenchDockerRun(ctx, options(cfg).Host, image)
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
