package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/docker"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/local"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/oci"
)

// openImages opens the local image store, creating it on first use.
func (s *settings) openImages() (*images.Store, error) {
	st, err := images.OpenStore(filepath.Join(s.dataDir, "images"))
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "image store: %v", err)
	}
	return st, nil
}

// newExecutor builds the backend p names. It never substitutes another
// backend: an unusable one is an error (fail closed).
func (s *settings) newExecutor(p sandbox.Policy) (sandbox.Executor, func(), error) {
	switch p.Backend {
	case "oci":
		imgs, err := s.openImages()
		if err != nil {
			return nil, nil, err
		}
		ex, err := oci.New(oci.Options{
			Runtime:  p.Runtime,
			StateDir: s.stateDir,
			Images:   imgs,
			Logger:   s.log,
		})
		if err != nil {
			return nil, nil, err
		}
		return ex, func() { _ = ex.Close() }, nil
	case "local":
		ex, err := local.New(local.Options{StateDir: s.stateDir, Getenv: os.LookupEnv})
		if err != nil {
			return nil, nil, err
		}
		return ex, func() {}, nil
	case "docker", "containerd":
		if p.Backend == "containerd" {
			return nil, nil, sandbox.Errorf(sandbox.ErrUnavailable, "backend %q is not available in this build", p.Backend)
		}
		ex, err := docker.New(context.Background(), docker.Options{StateDir: s.stateDir, Logger: s.log})
		if err != nil {
			return nil, nil, err
		}
		return ex, func() { _ = ex.Close() }, nil
	default:
		return nil, nil, sandbox.Errorf(sandbox.ErrInvalid, "policy.backend: unknown backend %q", p.Backend)
	}
}
