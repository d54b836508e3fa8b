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
	name := filepath.Base(runtimePath)
	path, err := lookRuntime(name, runtimePath)
	if err != nil {
		return 0, err
	}
	if !filepath.IsAbs(stateDir) {
		return 0, sandbox.Errorf(sandbox.ErrInvalid, "oci: bench state directory %q is not an absolute path", stateDir)
	}
	layout, err := readCgroupLayout()
	if err != nil {
		return 0, sandbox.Errorf(sandbox.ErrUnavailable, "oci: cgroups: %v", err)
	}
	var hex6 [6]byte
	_, _ = rand.Read(hex6[:])
	tag := "bench-raw-" + hex.EncodeToString(hex6[:])
	id := tag
	rt := &runtimeCLI{name: name, path: path, root: filepath.Join(stateDir, "runtime", name)}
	if name == RuntimeCrun {
		if hide := layout.unifiedMounts(); len(hide) > 0 {
			if rt.ns, err = newMountNamespace(hide); err != nil {
				return 0, sandbox.Errorf(sandbox.ErrUnavailable, "oci: crun on a hybrid cgroup host: %v", err)
			}
			defer rt.ns.close()
		}
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
	cgPath := "/" + cgroupParent + "/" + tag + "/" + id
	b, err := createBundle(filepath.Join(stateDir, "bundles", id), marker{Instance: tag, Runtime: name, Container: id, Cgroups: layout.dirsFor(cgPath)})
	if b != nil {
		cu.Add("bundle", func(context.Context) error { return b.remove() })
	}
	if err != nil {
		return 0, sandbox.Errorf(sandbox.ErrInternal, "oci: bench bundle: %v", err)
	}
	cu.Add("container", func(ctx context.Context) error {
		err := errors.Join(rt.remove(ctx, id), removeCgroupDirs(ctx, layout.dirsFor(cgPath)))
		for _, d := range layout.dirsFor("/" + cgroupParent + "/" + tag) {
			removeEmptyParents(d, cgroupParent)
		}
		return err
	})

	const uid, gid = 65534, 65534
	img, err := images.Host(stateDir, uid, gid)
	if err != nil {
		return 0, sandbox.Errorf(sandbox.ErrInternal, "oci: bench host image: %v", err)
	}
	p, _ := policy.Builtin(policy.WorkspaceWrite)
	opts, err := policy.SpecOpts(p, sandbox.Session{}, uid, gid)
	if err != nil {
		return 0, err
	}
	bm := make([]bindMount, len(img.Binds))
	for i, bd := range img.Binds {
		bm[i] = bindMount{Source: bd.Source, Target: bd.Target}
	}
	binds, err := b.hostRootfs(bm, img.Symlinks)
	if err != nil {
		return 0, sandbox.Errorf(sandbox.ErrInternal, "oci: bench rootfs: %v", err)
	}
	spec := policy.BaseSpec(bundleRootfs, binds)
	opts = append(opts,
		withReadonlyRoot(bundleRootfs),
		policy.WithProcess([]string{"true"}, img.Env, "/tmp"),
		policy.WithCgroupsPath(cgPath),
	)
	if name == RuntimeRunsc {
		opts = append(opts, withRunscPids())
	}
	for _, o := range opts {
		if err := o(spec); err != nil {
			return 0, err
		}
	}
	if err := b.mountPoints(spec.Mounts); err != nil {
		return 0, sandbox.Errorf(sandbox.ErrInternal, "oci: bench rootfs: %v", err)
	}
	if err := b.writeConfig(spec); err != nil {
		return 0, sandbox.Errorf(sandbox.ErrInternal, "oci: bench: %v", err)
	}

	cmd := rt.command(ctx, "", "run", "--bundle", b.dir, id)
	start := time.Now()
	if err := rt.start(cmd); err != nil {
		return 0, sandbox.Errorf(sandbox.ErrUnavailable, "oci: bench: %v", err)
	}
	err = cmd.Wait()
	d := time.Since(start)
	if err != nil {
		return 0, sandbox.Errorf(sandbox.ErrInternal, "oci: bench: raw %s run: %v", name, err)
	}
	return d, nil
}
