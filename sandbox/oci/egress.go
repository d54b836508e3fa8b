package oci

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/dsh-sandbox/dsh-sandbox/egress"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// startEgress starts the egress network of a call of network allowlist
// (its namespace, proxy and DNS server), points the call's env at the
// proxy (and, with credentials, at their placeholders and its CA bundle)
// and returns the spec options that join the namespace and bind the
// name-service files and the CA bundle. Its end is pushed on cu, above the container's
// removal, so it runs after the container is gone: connections still
// open are closed then, and the record goes into res.Egress.
func (e *Executor) startEgress(p sandbox.Policy, hostImage bool, call *sandbox.Call, log *slog.Logger, cu *driver.Cleanup, res *sandbox.Result) ([]sandbox.SpecOpt, error) {
	if err := e.step("egress"); err != nil {
		return nil, err
	}
	files := filepath.Join(e.opts.StateDir, "egress")
	if err := egress.WriteFiles(files); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "oci: call %s: %w", call.ID, err)
	}
	st, err := egress.StartPolicy(p, egress.Options{Network: e.opts.Network, Logger: log}, e.getenv, filepath.Join(files, "calls"), call.ID)
	if err != nil {
		return nil, err
	}
	cu.Add("egress", func(context.Context) error {
		res.Egress = st.Close()
		return nil
	})
	call.Env = egress.WithEnv(call.Env, st.Env)
	opts := []sandbox.SpecOpt{
		policy.WithNetworkNamespace(st.Call.NamespacePath()),
		policy.WithNetworkFiles(files, hostImage),
	}
	if st.CABundle != "" {
		opts = append(opts, policy.WithCABundle(st.CABundle))
	}
	return opts, nil
}
