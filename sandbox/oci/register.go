package oci

import (
	"context"
	"os/exec"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
)

var (
	_ backend.Reaper     = (*Executor)(nil)
	_ backend.DeadReaper = (*Executor)(nil)
)

// Descriptor describes the oci backend to the registry: runc (the
// default), crun and runsc, images from the local store, reaping, a
// doctor and the raw `runc run` bench baseline.
func Descriptor() backend.Descriptor {
	return backend.Descriptor{
		Name:     sandbox.BackendOCI,
		Runtimes: []sandbox.Runtime{sandbox.RuntimeRunc, sandbox.RuntimeCrun, sandbox.RuntimeRunsc},
		Needs:    backend.Needs{Images: true},
		Open: func(_ context.Context, cfg backend.Config, rt sandbox.Runtime) (sandbox.Executor, error) {
			return backend.Opened(New(Options{Runtime: string(rt), Service: cfg.Service, Images: cfg.Images, Pool: cfg.Pool}))
		},
		Reaps:  true,
		Images: backend.ImagesLocal,
		Doctor: func(ctx context.Context, cfg backend.Config, rt sandbox.Runtime) []doctor.Check {
			return Doctor(ctx, Options{Runtime: string(rt), Service: cfg.Service})
		},
		Bench: &backend.Bench{
			Baseline: "raw runc run",
			Run: func(ctx context.Context, cfg backend.Config, _ string) (time.Duration, error) {
				runc, err := exec.LookPath(RuntimeRunc)
				if err != nil {
					return 0, sandbox.Errorf(sandbox.ErrUnavailable, "oci: bench: %v", err)
				}
				return BenchRaw(ctx, runc, cfg.StateDir)
			},
		},
	}
}
