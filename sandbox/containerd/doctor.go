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
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// doctorTimeout bounds each daemon request of Doctor, and doctorRunTimeout
// its test call.
const (
	doctorTimeout    = 10 * time.Second
	doctorRunTimeout = 60 * time.Second
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
func Doctor(ctx context.Context, opts Options) []sandbox.Check {
	var checks []sandbox.Check
	add := func(name string, ok bool, format string, args ...any) bool {
		checks = append(checks, sandbox.Check{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
		return ok
	}
	ns := opts.Namespace
	if ns == "" {
		ns = DefaultNamespace
	}
	if opts.Address == "" {
		add("daemon", false, "Address is empty: name the containerd socket")
		return checks
	}
	if err := probe(ctx, opts.Address); err != nil {
		add("daemon", false, "%v", err)
		return checks
	}
	cli, err := containerd.New(opts.Address, containerd.WithTimeout(doctorTimeout))
	if err != nil {
		add("daemon", false, "connect to %s: %v", opts.Address, err)
		return checks
	}
	defer cli.Close()
	dctx, cancel := context.WithTimeout(ctx, doctorTimeout)
	defer cancel()
	v, err := cli.Version(dctx)
	if !add("daemon", err == nil, "%s", errOr(err, fmt.Sprintf("containerd %s (revision %s) on %s", v.Version, v.Revision, opts.Address))) {
		return checks
	}

	if err := identifiers.Validate(ns); err != nil {
		add("namespace", false, "namespace %q: %v", ns, err)
		return checks
	}
	known, err := cli.NamespaceService().List(dctx)
	switch {
	case err != nil:
		add("namespace", false, "list namespaces: %v", err)
		return checks
	case slices.Contains(known, ns):
		add("namespace", true, "%s exists", ns)
	default:
		add("namespace", true, "%s does not exist yet; importing an image creates it", ns)
	}

	ps, err := cli.IntrospectionService().Plugins(dctx, "type==io.containerd.snapshotter.v1,id=="+snapshotter)
	switch {
	case err != nil:
		add("snapshotter", false, "list plugins: %v", err)
		return checks
	case len(ps.Plugins) == 0:
		add("snapshotter", false, "the daemon has no %s snapshotter", snapshotter)
		return checks
	case ps.Plugins[0].InitErr != nil:
		add("snapshotter", false, "%s snapshotter did not load: %s", snapshotter, ps.Plugins[0].InitErr.Message)
		return checks
	default:
		add("snapshotter", true, "%s loaded", snapshotter)
	}

	shim, err := exec.LookPath(shimBinary)
	shimOK := add("shim", err == nil, "%s", errOr(err, shim))
	checks = append(checks, runtimeChecks(dctx)...)

	state := sandbox.CheckStateDir(opts.StateDir)
	stateOK := add(state.Name, state.OK, "%s", state.Detail)

	imgs, err := cli.ImageService().List(namespaces.WithNamespace(dctx, ns), labelFilter(sandbox.LabelOwner, sandbox.LabelOwnerValue))
	image := ""
	switch {
	case err != nil:
		add("image", false, "list images in namespace %s: %v", ns, err)
	case len(imgs) == 0:
		add("image", false, "no image imported by dsh-sandbox in namespace %s; import one with `dsh-sandbox images import --backend containerd FILE --name N`", ns)
	default:
		names := make([]string, len(imgs))
		for i, img := range imgs {
			names[i] = img.Name
		}
		slices.Sort(names)
		image = names[0]
		add("image", true, "%d imported (%s); the test call uses %s", len(names), joinShort(names, 5), image)
	}

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

// doctorRun runs `true` through a short-lived executor of its own.
func doctorRun(ctx context.Context, opts Options, ns, image string) (time.Duration, error) {
	opts.Namespace, opts.InstanceID = ns, ""
	e, err := New(ctx, opts)
	if err != nil {
		return 0, err
	}
	p, _ := policy.Builtin(policy.WorkspaceWrite)
	p.Backend, p.Image, p.Runtime = Backend, image, ""
	ctx, cancel := context.WithTimeout(ctx, doctorRunTimeout)
	defer cancel()
	d, err := sandbox.DoctorRun(ctx, e, p, e.instance)
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
