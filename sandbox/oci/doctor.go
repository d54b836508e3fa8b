package oci

import (
	"context"
	"debug/elf"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/backend"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/doctor"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/idmap"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

// Check is one finding of Doctor.
type Check = doctor.Check

// Doctor reports whether the runtime of opts is usable here and why not:
// its binary and version, root privileges, the cgroup layout (and, for
// crun on a hybrid host, whether the unified mount can be hidden), the
// state directory, and finally a real call of `true` under the built-in
// workspace-write policy. With runc and crun it also checks the stub (found,
// static). Checks after a failed prerequisite are reported as not run. Doctor leaves nothing behind.
func Doctor(ctx context.Context, opts Options) []Check {
	var checks backend.Checks
	add := checks.Add
	rt := opts.Runtime
	if rt == "" {
		rt = RuntimeRunc
	}
	path, err := lookRuntime(rt, opts.RuntimePath)
	if !add("binary", err == nil, "%s", errOr(err, path)) {
		return checks
	}
	cli := &runtimeCLI{name: rt, path: path}
	v, err := cli.version(ctx)
	add("version", err == nil, "%s", errOr(err, v))
	checks = append(checks, idmap.CVESelfTests(path)...)

	rootOK := os.Geteuid() == 0
	add("root", rootOK, "running as uid %d%s", os.Geteuid(), map[bool]string{true: "", false: "; the oci backend needs root"}[rootOK])

	layout, err := readCgroupLayout()
	cgOK := err == nil && len(layout.mounts) > 0
	switch {
	case err != nil:
		add("cgroups", false, "%v", err)
	case len(layout.mounts) == 0:
		add("cgroups", false, "no cgroup file system is mounted")
	default:
		mode := "v1"
		if layout.v2 {
			mode = "v2 (unified)"
		} else if layout.hybrid {
			mode = "v1 hybrid with cgroup2 at " + strings.Join(layout.unifiedMounts(), ", ")
		}
		detail := mode
		if rt == RuntimeCrun && layout.hybrid && rootOK {
			ns, err := newMountNamespace(layout.unifiedMounts())
			if err != nil {
				cgOK = false
				detail += fmt.Sprintf("; cannot hide it from crun: %v", err)
			} else {
				ns.close()
				detail += "; hidden from crun in a private mount namespace"
			}
		}
		add("cgroups", cgOK, "%s", detail)
	}

	state := doctor.StateDir(opts.StateDir)
	stateOK := add(state.Name, state.OK, "%s", state.Detail)
	stubOK := true
	if usesStub(rt) {
		p, err := stubProgram(opts.Stub)
		stubOK = add("stub", err == nil, "%s", errOr(err, p+": static, found"))
	}

	if !rootOK || !cgOK || !stateOK || !stubOK {
		add("run", false, "not run: a prerequisite failed")
		return checks
	}
	if d, err := doctorRun(ctx, opts, rt, path); err != nil {
		add("run", false, "%v", err)
	} else {
		add("run", true, "`true` ran in a fresh container in %v", d.Round(time.Millisecond))
	}
	return checks
}

// doctorRun runs `true` through a short-lived executor.
func doctorRun(ctx context.Context, opts Options, rt, path string) (time.Duration, error) {
	opts.Runtime, opts.RuntimePath, opts.InstanceID = rt, path, ""
	e, err := New(opts)
	if err != nil {
		return 0, err
	}
	defer e.Close()
	p, _ := policy.Builtin(policy.WorkspaceWrite)
	p.Backend, p.Runtime = sandbox.BackendOCI, sandbox.Runtime(rt)
	ctx, cancel := context.WithTimeout(ctx, backend.DoctorRunTimeout)
	defer cancel()
	return doctor.Run(ctx, e, p, e.instance)
}

// stubProgram locates the stub (stub.Locate) and checks that it is a
// static executable: it runs in the container's root file system, which
// need not have the host's dynamic loader and libraries.
func stubProgram(path string) (string, error) {
	p, err := stub.Locate(path)
	if err != nil {
		return "", err
	}
	f, err := elf.Open(p)
	if err != nil {
		return "", fmt.Errorf("%s: not an ELF executable: %v", p, err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return "", fmt.Errorf("%s is dynamically linked: build it with CGO_ENABLED=0 (docs/pool.md)", p)
		}
	}
	return p, nil
}

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}
