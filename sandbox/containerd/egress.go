package containerd

import (
	"context"

	"github.com/dsh-sandbox/dsh-sandbox/egress"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/driver"
)

// joinEgress starts the call's egress network when its policy's network
// is an allowlist (egress.StartCall: its namespace, proxy and DNS server,
// the call's env pointed at the proxy), pushing its end onto the call's
// cleanup stack, and returns opts with the spec option that joins it
// (policy.WithEgress; the shim's runtime opens the namespace by its
// /proc path in this process). Other calls get opts as they are.
func (e *Executor) joinEgress(call *driver.Running, opts []policy.SpecOpt) ([]policy.SpecOpt, error) {
	if call.Request.Policy.Network != policy.NetworkAllowlist {
		return opts, nil
	}
	st, err := egress.StartCall(Backend, call.Request.Policy, egress.Options{Network: e.opts.Network, Logger: call.Log}, e.opts.Getenv, e.opts.StateDir, call.Call)
	if err != nil {
		return nil, err
	}
	// Closed after the container is removed (pushed before it).
	call.Cleanup.Add("egress", func(context.Context) error {
		call.Result.Egress = st.Close()
		return nil
	})
	return append(opts, policy.WithEgress(st, false)), nil
}
