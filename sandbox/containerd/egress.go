package containerd

import (
	"log/slog"
	"path/filepath"

	"github.com/dsh-sandbox/dsh-sandbox/egress"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// startEgress starts the egress network of a call of network allowlist
// (its namespace, proxy and DNS server), points the call's env at the
// proxy (and, with credentials, at their placeholders and its CA
// bundle) and returns the spec options that join the namespace (the
// shim's runtime opens it by its /proc path in this process) and bind
// resolv.conf and the CA bundle, and the function that ends it and returns the record. On
// error nothing is left.
func (e *Executor) startEgress(p sandbox.Policy, call *sandbox.Call, log *slog.Logger) ([]sandbox.SpecOpt, func() []sandbox.Connection, error) {
	files := filepath.Join(e.opts.StateDir, "egress")
	if err := egress.WriteFiles(files); err != nil {
		return nil, nil, sandbox.Errorf(sandbox.ErrUnavailable, "containerd: call %s: %w", call.ID, err)
	}
	st, err := egress.StartPolicy(p, egress.Options{Network: e.opts.Network, Logger: log}, e.opts.Getenv, filepath.Join(files, "calls"), call.ID)
	if err != nil {
		return nil, nil, err
	}
	call.Env = egress.WithEnv(call.Env, st.Env)
	opts := []sandbox.SpecOpt{
		policy.WithNetworkNamespace(st.Call.NamespacePath()),
		policy.WithNetworkFiles(files, false),
	}
	if st.CABundle != "" {
		opts = append(opts, policy.WithCABundle(st.CABundle))
	}
	return opts, st.Close, nil
}
