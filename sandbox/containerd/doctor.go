package containerd

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/identifiers"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// shimBinary is the program the daemon starts for runtimeName.
const shimBinary = "containerd-shim-runc-v2"

// Doctor reports whether the containerd backend is usable with opts and
// why not, as checks in this order: "daemon" (the socket answers; its
// version), "namespace" (valid; whether it exists yet), "snapshotter"
// (the daemon's overlayfs snapshotter loaded), "shim"
// (containerd-shim-runc-v2 on PATH), "state" (StateDir writable),
// "image" (an image imported by dsh-sandbox in the namespace; the first
// by name is used) and "run" (a real call of `true` under the built-in
// workspace-write policy on that image). It stops after a failure that
// makes the later checks meaningless. Doctor leaves nothing behind: the
// test call's container, task and snapshot are removed, and its instance
// lock file too.
func Doctor(ctx context.Context, opts Options) []doctor.Check {
	var checks backend.Checks
	keep, add := checks.Keep, checks.Add
	ns := opts.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	cli, failed := doctorConnect(ctx, opts)
	if cli == nil {
		keep(failed)
		return checks
	}
	defer cli.Close()
	dctx, cancel := context.WithTimeout(ctx, backend.DoctorRequestTimeout)
	defer cancel()
	v, err := cli.Version(dctx)
	if !add("daemon", err == nil, "%s", errOr(err, fmt.Sprintf("containerd %s (revision %s) on %s", v.Version, v.Revision, opts.Address))) {
		return checks
	}
	if !keep(namespaceCheck(dctx, cli, ns)) || !keep(snapshotterCheck(dctx, cli)) {
		return checks
	}

	shim, err := exec.LookPath(shimBinary)
	shimOK := add("shim", err == nil, "%s", errOr(err, shim))
	checks = append(checks, runtimeChecks(dctx)...)

	stateOK := keep(doctor.StateDir(opts.StateDir))

	imageChecked, image := imageCheck(dctx, cli, ns)
	keep(imageChecked)

	if !shimOK || !stateOK || image == "" {
		add("run", false, "not run: a prerequisite failed")
		return checks
	}
	if d, err := doctorRun(ctx, opts, ns, image); err != nil {
		add("run", false, "%v", err)
	} else {
		add("run", true, "`true` ran in a fresh container of %s in %v", image, d.Round(time.Millisecond))
	}
	return checks
}

// doctorConnect connects to the daemon at opts.Address once it answers.
// When it cannot, it returns a nil client and the failed "daemon" check
// that says why; the caller closes a client it returns.
func doctorConnect(ctx context.Context, opts Options) (*containerd.Client, doctor.Check) {
	if opts.Address == "" {
		return nil, doctor.Checkf("daemon", false, "Address is empty: name the containerd socket")
	}
	if err := probe(ctx, opts.Address); err != nil {
		return nil, doctor.Checkf("daemon", false, "%v", err)
	}
	cli, err := containerd.New(opts.Address, containerd.WithTimeout(backend.DoctorRequestTimeout))
	if err != nil {
		return nil, doctor.Checkf("daemon", false, "connect to %s: %v", opts.Address, err)
	}
	return cli, doctor.Check{}
}

// namespaceCheck is the "namespace" check of Doctor: ns is valid, and
// whether it exists yet.
func namespaceCheck(ctx context.Context, cli *containerd.Client, ns string) doctor.Check {
	if err := identifiers.Validate(ns); err != nil {
		return doctor.Checkf("namespace", false, "namespace %q: %v", ns, err)
	}
	known, err := cli.NamespaceService().List(ctx)
	switch {
	case err != nil:
		return doctor.Checkf("namespace", false, "list namespaces: %v", err)
	case slices.Contains(known, ns):
		return doctor.Checkf("namespace", true, "%s exists", ns)
	}
	return doctor.Checkf("namespace", true, "%s does not exist yet; importing an image creates it", ns)
}

// snapshotterCheck is the "snapshotter" check of Doctor: the daemon's
// overlayfs snapshotter loaded.
func snapshotterCheck(ctx context.Context, cli *containerd.Client) doctor.Check {
	ps, err := cli.IntrospectionService().Plugins(ctx, "type==io.containerd.snapshotter.v1,id=="+snapshotter)
	switch {
	case err != nil:
		return doctor.Checkf("snapshotter", false, "list plugins: %v", err)
	case len(ps.Plugins) == 0:
		return doctor.Checkf("snapshotter", false, "the daemon has no %s snapshotter", snapshotter)
	case ps.Plugins[0].InitErr != nil:
		return doctor.Checkf("snapshotter", false, "%s snapshotter did not load: %s", snapshotter, ps.Plugins[0].InitErr.Message)
	}
	return doctor.Checkf("snapshotter", true, "%s loaded", snapshotter)
}

// imageCheck is the "image" check of Doctor: an image imported by
// dsh-sandbox is in namespace ns. It also returns the first such image
// by name, which the test call uses, or "" when there is none.
func imageCheck(ctx context.Context, cli *containerd.Client, ns string) (doctor.Check, string) {
	imgs, err := cli.ImageService().List(namespaces.WithNamespace(ctx, ns), labelFilter(reap.LabelOwner, reap.LabelOwnerValue))
	switch {
	case err != nil:
		return doctor.Checkf("image", false, "list images in namespace %s: %v", ns, err), ""
	case len(imgs) == 0:
		return doctor.Checkf("image", false, "no image imported by dsh-sandbox in namespace %s; import one with `dsh-sandbox images import --backend containerd FILE --name N`", ns), ""
	}
	names := make([]string, len(imgs))
	for i, img := range imgs {
		names[i] = img.Name
	}
	slices.Sort(names)
	image := names[0]
	return doctor.Checkf("image", true, "%d imported (%s); the test call uses %s", len(names), joinShort(names, 5), image), image
}

// doctorRun runs `true` through a short-lived executor of its own.
func doctorRun(ctx context.Context, opts Options, ns, image string) (time.Duration, error) {
	opts.Namespace, opts.InstanceID = ns, ""
	e, err := New(ctx, opts)
	if err != nil {
		return 0, err
	}
	p, _ := policy.Builtin(policy.WorkspaceWrite)
	p.Backend, p.Image, p.Runtime = Backend, image, ""
	ctx, cancel := context.WithTimeout(ctx, backend.DoctorRunTimeout)
	defer cancel()
	d, err := doctor.Run(ctx, e, p, e.instance)
	if cerr := e.Close(); err == nil && cerr != nil {
		err = cerr
	}
	return d, err
}

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}

// joinShort joins the first n names, saying how many more there are.
func joinShort(names []string, n int) string {
	if len(names) <= n {
		return fmt.Sprint(names)
	}
	return fmt.Sprintf("%v and %d more", names[:n], len(names)-n)
}
