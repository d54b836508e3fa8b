package containerd

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/pkg/identifiers"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/reap"
)

// BenchCtrRun is the containerd baseline of `dsh-sandbox bench`: it
// times one `ctr --address ADDRESS -n NAMESPACE run --rm --read-only
// IMAGE <unique id> true` (the whole command, from start to exit), which
// creates the container with its snapshot and task, runs it and removes
// all three. image must be in the namespace already. The container's
// cgroup is a fresh top-level one that runc removes with the task
// (ctr's default, /NAMESPACE/ID, would leave an empty NAMESPACE cgroup
// behind). A failure is an error carrying ctr's stderr; what the failed
// run left is deleted, best effort.
func BenchCtrRun(ctx context.Context, address, namespace, image string) (time.Duration, error) {
	if address == "" {
		return 0, sandbox.Errorf(sandbox.ErrInvalid, "containerd: bench: address is empty")
	}
	if err := identifiers.Validate(namespace); err != nil {
		return 0, sandbox.Errorf(sandbox.ErrInvalid, "containerd: bench: namespace %q: %v", namespace, err)
	}
	if image == "" || strings.HasPrefix(image, "-") {
		return 0, sandbox.Errorf(sandbox.ErrInvalid, "containerd: bench: image %q is not an image name", image)
	}
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		return 0, sandbox.Errorf(sandbox.ErrUnavailable, "containerd: bench: ctr is not installed: %v", err)
	}
	id := "dsh-sandbox-bench-" + reap.NewInstanceID()
	cmd := exec.CommandContext(ctx, ctr, "--address", address, "-n", namespace,
		"run", "--rm", "--read-only", "--cgroup", "/"+id, image, id, "true")
	cmd.Env = []string{}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	t := time.Now()
	err = cmd.Run()
	d := time.Since(t)
	if err != nil {
		// Best effort: what a failed run may have left (--rm removes it
		// only after a run that got as far as the exit).
		cleanupCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, args := range [][]string{{"tasks", "delete", "--force", id}, {"containers", "delete", id}} {
			c := exec.CommandContext(cleanupCtx, ctr, append([]string{"--address", address, "-n", namespace}, args...)...)
			c.Env = []string{}
			_ = c.Run()
		}
		return 0, sandbox.Errorf(sandbox.ErrUnavailable, "containerd: bench: ctr run %s: %v; stderr %q", image, err, strings.TrimSpace(stderr.String()))
	}
	return d, nil
}
