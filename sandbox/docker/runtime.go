package docker

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// infoTimeout bounds the engine's Info call that lists its runtimes.
const infoTimeout = 30 * time.Second

// engineRuntimes asks the engine which OCI runtimes it has registered,
// sorted by name.
func (e *Executor) engineRuntimes(ctx context.Context) ([]string, error) {
	ictx, cancel := context.WithTimeout(ctx, infoTimeout)
	defer cancel()
	info, err := e.cli.Info(ictx)
	if err != nil {
		return nil, err
	}
	return slices.Sorted(maps.Keys(info.Runtimes)), nil
}

// checkRuntime fails unless the engine has the runtime name registered
// (an empty name means the engine's default runtime). The runtimes are
// cached per executor and asked for again when name is not among them,
// so a runtime registered while the executor lives is found. A missing
// runtime is an ErrUnavailable error: the call never falls back to
// another runtime.
func (e *Executor) checkRuntime(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	e.runtimesMu.Lock()
	defer e.runtimesMu.Unlock()
	if slices.Contains(e.runtimes, name) {
		return nil
	}
	have, err := e.engineRuntimes(ctx)
	if err != nil {
		return unavailable(err, "policy.runtime %q: list the engine's runtimes", name)
	}
	e.runtimes = have
	if slices.Contains(have, name) {
		return nil
	}
	return sandbox.Errorf(sandbox.ErrUnavailable, "docker: policy.runtime %q: the engine at %s has no such runtime (it has %s); register it in the engine's daemon.json, e.g. {\"runtimes\": {%q: {\"path\": \"/usr/bin/%s\"}}}, and reload or restart dockerd",
		name, e.cli.DaemonHost(), strings.Join(have, ", "), name, name)
}
