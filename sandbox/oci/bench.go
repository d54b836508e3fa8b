package oci

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// BenchRaw is the baseline of `dsh-sandbox bench`: it prepares, outside
// the measurement, a hand-made bundle with the same hardening a call
// gets (the `host` image as nobody, the built-in workspace-write policy's
// namespaces, capabilities, seccomp, masks, devices, limits and
// read-only root) running `true` directly, then times one bare
// `runtime run` of it with stdio on /dev/null — no capture, no
// supervision, no teardown. The runtime is named by the binary's base
// name (runc, crun or runsc); stateDir must be absolute. Everything it
// creates is removed before it returns.
func BenchRaw(ctx context.Context, runtimePath, stateDir string) (time.Duration, error) {
	rt, layout, err := benchRuntime(runtimePath, stateDir)
	if err != nil {
		return 0, err
	}
	if rt.ns != nil {
		defer rt.ns.close()
	}
	if err := os.MkdirAll(rt.root, 0o700); err != nil {
		return 0, sandbox.Errorf(sandbox.ErrUnavailable, "oci: bench state: %v", err)
	}

	var cu driver.Cleanup
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), driver.TeardownTimeout)
		defer cancel()
		_ = cu.Clean(tctx)
	}()
	var hex6 [6]byte
	_, _ = rand.Read(hex6[:])
	tag := "bench-raw-" + hex.EncodeToString(hex6[:])
	id := tag
	cgPath := "/" + cgroupParent + "/" + tag + "/" + id
	b, err := benchBundle(&cu, rt, layout, stateDir, tag, id, cgPath)
	if err != nil {
		return 0, err
	}
	if err := benchConfig(b, rt.name, stateDir, cgPath); err != nil {
		return 0, err
	}
	return benchRun(ctx, rt, b, id)
}

// benchRuntime finds the runtime named by the base name of runtimePath
// and reads the host's cgroup layout; the runtime's state goes below
// stateDir. For crun on a hybrid cgroup host it makes the mount
// namespace that hides the unified hierarchy, which the caller closes.
func benchRuntime(runtimePath, stateDir string) (*runtimeCLI, cgroupLayout, error) {
	name := filepath.Base(runtimePath)
	path, err := lookRuntime(name, runtimePath)
	if err != nil {
		return nil, cgroupLayout{}, err
	}
	if !filepath.IsAbs(stateDir) {
		return nil, cgroupLayout{}, sandbox.Errorf(sandbox.ErrInvalid, "oci: bench state directory %q is not an absolute path", stateDir)
	}
	layout, err := readCgroupLayout()
	if err != nil {
		return nil, cgroupLayout{}, sandbox.Errorf(sandbox.ErrUnavailable, "oci: cgroups: %v", err)
	}
	rt := &runtimeCLI{name: name, path: path, root: filepath.Join(stateDir, "runtime", name)}
	if name == RuntimeCrun {
		if hide := layout.unifiedMounts(); len(hide) > 0 {
			if rt.ns, err = newMountNamespace(hide); err != nil {
				return nil, cgroupLayout{}, sandbox.Errorf(sandbox.ErrUnavailable, "oci: crun on a hybrid cgroup host: %v", err)
			}
		}
	}
	return rt, layout, nil
}

// benchBundle makes the bundle of container id (of instance tag, in
// cgroup cgPath) below stateDir and pushes onto cu the removal of the
// bundle and, before it, of the container and its cgroups.
func benchBundle(cu *driver.Cleanup, rt *runtimeCLI, layout cgroupLayout, stateDir, tag, id, cgPath string) (*bundle, error) {
	b, err := createBundle(filepath.Join(stateDir, "bundles", id), marker{Instance: tag, Runtime: rt.name, Container: id, Cgroups: layout.dirsFor(cgPath)})
	if b != nil {
		cu.Add("bundle", func(context.Context) error { return b.remove() })
	}
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInternal, "oci: bench bundle: %v", err)
	}
	cu.Add("container", func(ctx context.Context) error {
		err := errors.Join(rt.remove(ctx, id), removeCgroupDirs(ctx, layout.dirsFor(cgPath)))
		for _, d := range layout.dirsFor("/" + cgroupParent + "/" + tag) {
			removeEmptyParents(d, tag) // not cgroupParent: see Executor.release
		}
		return err
	})
	return b, nil
}

// benchConfig gives the bundle the rootfs of the host image as nobody
// and the config.json of a call under the built-in workspace-write
// policy, for runtime name, running `true` in cgroup cgPath.
func benchConfig(b *bundle, name, stateDir, cgPath string) error {
	const uid, gid = 65534, 65534
	img, err := images.Host(stateDir, uid, gid)
	if err != nil {
		return sandbox.Errorf(sandbox.ErrInternal, "oci: bench host image: %v", err)
	}
	p, _ := policy.Builtin(policy.WorkspaceWrite)
	opts, err := policy.SpecOpts(p, sandbox.Session{}, uid, gid)
	if err != nil {
		return err
	}
	binds, err := b.hostRootfs(imageBinds(img), img.Symlinks)
	if err != nil {
		return sandbox.Errorf(sandbox.ErrInternal, "oci: bench rootfs: %v", err)
	}
	if name == RuntimeRunsc {
		opts = append(opts, withRunscPids())
	}
	spec, err := policy.CallSpec(policy.SpecParts{
		Root: bundleRootfs, Binds: binds,
		Args: []string{"true"}, Env: img.Env, Cwd: "/tmp",
		Opts:        opts,
		CgroupsPath: cgPath,
	})
	if err != nil {
		return err
	}
	if err := b.mountPoints(spec.Mounts); err != nil {
		return sandbox.Errorf(sandbox.ErrInternal, "oci: bench rootfs: %v", err)
	}
	if err := b.writeConfig(spec); err != nil {
		return sandbox.Errorf(sandbox.ErrInternal, "oci: bench: %v", err)
	}
	return nil
}

// benchRun times one bare `runtime run` of container id from bundle b.
func benchRun(ctx context.Context, rt *runtimeCLI, b *bundle, id string) (time.Duration, error) {
	cmd := rt.command(ctx, "", "run", "--bundle", b.dir, id)
	start := time.Now()
	if err := rt.start(cmd); err != nil {
		return 0, sandbox.Errorf(sandbox.ErrUnavailable, "oci: bench: %v", err)
	}
	err := cmd.Wait()
	d := time.Since(start)
	if err != nil {
		return 0, sandbox.Errorf(sandbox.ErrInternal, "oci: bench: raw %s run: %v", rt.name, err)
	}
	return d, nil
}
