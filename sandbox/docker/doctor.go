package docker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/system"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// Doctor reports whether the docker backend is usable with opts and why
// not, as checks in this order: "daemon" (the engine answers at which
// host, with its server and API versions), "runtimes" (the runtimes it
// has registered; failed when it lacks policy.DefaultRuntime, which the
// test call uses), "userns" (whether the engine remaps user namespaces,
// and with which map; failed when it remaps with a map the host's
// /etc/subuid and /etc/subgid do not tell, which New refuses; an engine
// that does not remap passes, saying that calls as uid 0 are refused),
// "state" (opts.StateDir is writable), "image" (an image
// imported by dsh-sandbox, labelled reap.LabelOwner, exists; the
// newest one is used) and "run" (a real call of `true` under the built-in
// workspace-write policy on that image). It stops after a failed check
// that makes the rest meaningless: an engine that does not answer ends
// it, and no image, failed runtimes or state leave out the test call.
// Doctor leaves nothing behind in the engine. It is safe to call
// concurrently.
func Doctor(ctx context.Context, opts Options) []doctor.Check {
	var checks backend.Checks
	keep, add := checks.Keep, checks.Add

	cli, err := newClient(opts.Host)
	if err != nil {
		add("daemon", false, "%v", err)
		return checks
	}
	defer cli.Close()
	dctx, cancel := context.WithTimeout(ctx, backend.DoctorRequestTimeout)
	v, err := cli.ServerVersion(dctx)
	cancel()
	if err != nil {
		add("daemon", false, "no engine answers at %s (start dockerd, or set DOCKER_HOST): %v", cli.DaemonHost(), err)
		return checks
	}
	add("daemon", true, "engine at %s: server %s, API %s (this client speaks %s)", cli.DaemonHost(), v.Version, v.APIVersion, cli.ClientVersion())

	dctx, cancel = context.WithTimeout(ctx, backend.DoctorRequestTimeout)
	info, err := cli.Info(dctx)
	cancel()
	runtimesOK := false
	if err != nil {
		add("runtimes", false, "cannot list the engine's runtimes: %v", err)
	} else {
		runtimesOK = keep(runtimesCheck(info))
		keep(usernsCheck(info))
	}

	stateOK := keep(doctor.StateDir(opts.StateDir))

	dctx, cancel = context.WithTimeout(ctx, backend.DoctorRequestTimeout)
	imgs, err := ownedImages(dctx, cli, false)
	cancel()
	name, picked := firstNamed(imgs)
	switch {
	case err != nil:
		add("image", false, "cannot list the engine's images: %v", err)
		return checks
	case name == "":
		add("image", false, "no image imported by dsh-sandbox (label %s=%s) in the engine; import one with `dsh-sandbox images import --backend docker FILE --name N`", reap.LabelOwner, reap.LabelOwnerValue)
		return checks
	}
	others := ""
	if n := len(imgs) - 1; n > 0 {
		others = fmt.Sprintf("; %d other image(s) of dsh-sandbox", n)
	}
	add("image", true, "%s (%s, %.1f MB, imported %s)%s", name, shortID(picked.ID), float64(picked.Size)/1e6, time.Unix(picked.Created, 0).UTC().Format(time.RFC3339), others)

	if !runtimesOK || !stateOK || !remapOK(checks) {
		return checks
	}
	if d, err := doctorRun(ctx, opts, name); err != nil {
		add("run", false, "`true` on image %s under policy %s: %v", name, policy.WorkspaceWrite, err)
	} else {
		add("run", true, "`true` ran in a fresh container of %s under policy %s in %v", name, policy.WorkspaceWrite, d.Round(time.Millisecond))
	}
	return checks
}

// runtimesCheck is the "runtimes" check of Doctor on the engine's info:
// the runtimes it has registered, failed when it lacks
// policy.DefaultRuntime.
func runtimesCheck(info system.Info) doctor.Check {
	have := make([]string, 0, len(info.Runtimes))
	for name := range info.Runtimes {
		have = append(have, name)
	}
	slices.Sort(have)
	ok := slices.Contains(have, string(policy.DefaultRuntime))
	detail := fmt.Sprintf("registered: %s; default %s", strings.Join(have, ", "), info.DefaultRuntime)
	if !ok {
		detail += fmt.Sprintf("; %q, the default of policy.runtime, is missing: register it in the engine's daemon.json \"runtimes\"", policy.DefaultRuntime)
	}
	return doctor.Checkf("runtimes", ok, "%s", detail)
}

// usernsCheck is the "userns" check of Doctor on the engine's info:
// whether the engine remaps user namespaces, and with which map.
func usernsCheck(info system.Info) doctor.Check {
	switch r, err := detectRemap(info.SecurityOptions, info.DockerRootDir); {
	case err != nil:
		return doctor.Checkf("userns", false, "%v: calls cannot run", err)
	case r.enabled():
		return doctor.Checkf("userns", true, "the engine remaps user namespaces (%s): calls run as unprivileged host uids, with id-mapped binds; only user: %s runs as host uid 0", r, policy.UserHostRoot)
	}
	return doctor.Checkf("userns", true, "the engine does not remap user namespaces: calls as uid 0 (a root-owned workspace under user auto) are refused; start it with --userns-remap=default to run them, or say user: %s in the policy", policy.UserHostRoot)
}

// firstNamed returns the first of imgs that has a name, and that name;
// "" and the zero summary when none has.
func firstNamed(imgs []image.Summary) (string, image.Summary) {
	for _, img := range imgs {
		if tag := imageName(img); tag != "" {
			return tag, img
		}
	}
	return "", image.Summary{}
}

// remapOK reports whether no "userns" check failed.
func remapOK(checks []doctor.Check) bool {
	return !slices.ContainsFunc(checks, func(c doctor.Check) bool { return c.Name == "userns" && !c.OK })
}

// imageName is the first name of img, or "" when it has none.
func imageName(img image.Summary) string {
	for _, t := range img.RepoTags {
		if t != "" && t != "<none>:<none>" {
			return t
		}
	}
	return ""
}

// shortID is the first 12 hex digits of an image id.
func shortID(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	if len(id) > 12 {
		id = id[:12]
	}
	return id
}

// doctorRun runs `true` through a short-lived executor of its own
// instance and returns how long the call took.
func doctorRun(ctx context.Context, opts Options, name string) (time.Duration, error) {
	opts.InstanceID = ""
	ctx, cancel := context.WithTimeout(ctx, backend.DoctorRunTimeout)
	defer cancel()
	e, err := New(ctx, opts)
	if err != nil {
		return 0, err
	}
	defer e.Close()
	p, ok := policy.Builtin(policy.WorkspaceWrite)
	if !ok {
		return 0, sandbox.Errorf(sandbox.ErrInternal, "docker: the built-in policy %q is missing", policy.WorkspaceWrite)
	}
	p.Backend, p.Image = Backend, name
	return doctor.Run(ctx, e, p, e.instance)
}
