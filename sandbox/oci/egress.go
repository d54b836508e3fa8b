package oci

import (
	"context"
	"log/slog"

	"github.com/dsh-sandbox/dsh-sandbox/egress"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// startEgress starts the egress network of a call of network allowlist
// (egress.StartCall: its namespace, proxy and DNS server, the call's env
// pointed at the proxy) and returns the spec option that joins it
// (policy.WithEgress). Its end is pushed on cu, above the container's
// removal, so it runs after the container is gone: connections still
// open are closed then, and the record goes into res.Egress.
func (e *Executor) startEgress(p sandbox.Policy, hostImage bool, call *sandbox.Call, log *slog.Logger, cu *driver.Cleanup, res *sandbox.Result) (policy.SpecOpt, error) {
	if err := e.step("egress"); err != nil {
		return nil, err
	}
	st, err := egress.StartCall("oci", p, egress.Options{Network: e.opts.Network, Logger: log}, e.opts.Getenv, e.opts.StateDir, call)
	if err != nil {
		return nil, err
	}
	cu.Add("egress", func(context.Context) error {
		res.Egress = st.Close()
		return nil
	})
	return policy.WithEgress(st, hostImage), nil
}
