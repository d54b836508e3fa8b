package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/containerd"
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

func (s *settings) dockerOptions() docker.Options {
	return docker.Options{Host: s.dockerHost, StateDir: s.stateDir, Logger: s.log}
}

func (s *settings) containerdOptions() containerd.Options {
	return containerd.Options{Address: s.containerdAddress, Namespace: s.containerdNamespace, StateDir: s.stateDir, Logger: s.log}
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
	case docker.Backend, containerd.Backend:
		ex, err := s.openDaemon(context.Background(), p.Backend)
		if err != nil {
			return nil, nil, err
		}
		return ex, func() { _ = ex.Close() }, nil
	default:
		return nil, nil, sandbox.Errorf(sandbox.ErrInvalid, "policy.backend: unknown backend %q", p.Backend)
	}
}

// reapExecutor removes what dead instances left on ex's backend. It
// returns the backend's report, how many objects it removed, and the
// error; an executor without leftovers to reap (local) reports nothing.
func reapExecutor(ctx context.Context, ex sandbox.Executor) (report any, removed int, err error) {
	switch e := ex.(type) {
	case *oci.Executor:
		rep, err := e.Reap(ctx)
		return rep, len(rep.Containers) + len(rep.Bundles) + len(rep.Mounts) + len(rep.Cgroups), err
	case *docker.Executor:
		rep, err := e.Reap(ctx)
		return rep, len(rep.Containers) + len(rep.Images), err
	case *containerd.Executor:
		rep, err := e.Reap(ctx)
		return rep, len(rep.Containers) + len(rep.Snapshots), err
	}
	return nil, 0, nil
}

// reapBeforeCalls is reapExecutor for a command about to run calls
// (exec, mcp): the oci executor reaps only when its state directory
// shows a dead instance, so that a call spawns the runtime once; the
// daemon backends ask their daemon, which spawns nothing.
func reapBeforeCalls(ctx context.Context, ex sandbox.Executor) error {
	if e, ok := ex.(*oci.Executor); ok {
		_, err := e.ReapDead(ctx)
		return err
	}
	_, _, err := reapExecutor(ctx, ex)
	return err
}

// daemonExecutor is a daemon backend's executor (docker, containerd):
// it also takes root-filesystem tarballs as images and lists them.
type daemonExecutor interface {
	sandbox.Executor
	ImportRootfs(ctx context.Context, r io.Reader, name string, env []string) error
	Images(ctx context.Context) ([]images.Image, error)
	Close() error
}

// openDaemon connects to the daemon of backend docker or containerd.
func (s *settings) openDaemon(ctx context.Context, backend string) (daemonExecutor, error) {
	var ex daemonExecutor
	var err error
	switch backend {
	case docker.Backend:
		ex, err = docker.New(ctx, s.dockerOptions())
	case containerd.Backend:
		ex, err = containerd.New(ctx, s.containerdOptions())
	default:
		return nil, usageError("--backend: %q is not a daemon backend (docker or containerd)", backend)
	}
	if err != nil {
		return nil, err // not ex: a nil *Executor in an interface is not nil
	}
	return ex, nil
}

// importIntoDaemon loads an image into a daemon backend. The file goes
// through the local store's importer first, in a temporary store, so
// that every format it reads works and its checks (no path traversal,
// no links leaving the root, no devices, no setuid) apply whatever the
// backend; the checked root filesystem is then streamed to the daemon.
// progress gets the phase ("unpacking", "loading") with its counts.
func (s *settings) importIntoDaemon(ctx context.Context, backend, file, name string, progress func(phase string, done, total int64)) (*images.Image, error) {
	if err := os.MkdirAll(s.dataDir, 0o700); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "data directory: %v", err)
	}
	staging, err := os.MkdirTemp(s.dataDir, ".import-")
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "data directory: %v", err)
	}
	defer os.RemoveAll(staging)

	ex, err := s.openDaemon(ctx, backend)
	if err != nil {
		return nil, err
	}
	defer ex.Close()

	st, err := images.OpenStore(staging)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "staging store: %v", err)
	}
	var unpack func(done, total int64)
	if progress != nil {
		unpack = func(done, total int64) { progress("unpacking", done, total) }
	}
	img, err := st.Import(ctx, file, name, unpack)
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	go func() {
		var load func(done int64)
		if progress != nil {
			load = func(done int64) { progress("loading", done, img.Size) }
		}
		pw.CloseWithError(images.WriteRootfsTar(ctx, pw, img, load))
	}()
	err = ex.ImportRootfs(ctx, pr, img.Name, img.Env)
	pr.CloseWithError(fmt.Errorf("import ended"))
	if err != nil {
		return nil, err
	}
	return img, nil
}

// describeReport says what a backend's reap report lists, for people.
func describeReport(rep any) string {
	switch r := rep.(type) {
	case oci.ReapReport:
		return fmt.Sprintf("%d containers, %d bundles, %d mounts, %d cgroups of %d dead instances",
			len(r.Containers), len(r.Bundles), len(r.Mounts), len(r.Cgroups), len(r.Instances))
	case docker.ReapReport:
		return fmt.Sprintf("%d containers, %d unused unnamed images; %d dead instances", len(r.Containers), len(r.Images), len(r.Instances))
	case containerd.ReapReport:
		return fmt.Sprintf("%d containers, %d snapshots; %d dead instances", len(r.Containers), len(r.Snapshots), len(r.Instances))
	}
	return fmt.Sprintf("%v", rep)
}

// listImages lists the images of a backend: the local store's for oci,
// those dsh-sandbox imported for a daemon backend.
func (s *settings) listImages(ctx context.Context, backend string) ([]images.Image, error) {
	if backend != "oci" {
		ex, err := s.openDaemon(ctx, backend)
		if err != nil {
			return nil, err
		}
		defer ex.Close()
		return ex.Images(ctx)
	}
	st, err := s.openImages()
	if err != nil {
		return nil, err
	}
	return st.List()
}
