package docker

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/images"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// BenchDockerRun is the docker baseline of `dsh-sandbox bench`: it times
// one `docker run --rm --pull never --network none --read-only IMAGE true`
// through the docker CLI, talking to the engine at host (DOCKER_HOST=host;
// empty means the CLI's own default and environment). image must already
// be in the engine (no registry is asked: --pull never). A CLI that is
// missing is an ErrUnavailable error, a run that fails an ErrInternal
// error carrying the CLI's stderr.
func BenchDockerRun(ctx context.Context, host, image string) (time.Duration, error) {
	if err := images.ValidateName(image); err != nil {
		return 0, sandbox.Errorf(sandbox.ErrInvalid, "docker: bench image %q: %w", image, err)
	}
	bin, err := exec.LookPath("docker")
	if err != nil {
		return 0, sandbox.Errorf(sandbox.ErrUnavailable, "docker: bench: the docker CLI: %v", err)
	}
	cmd := exec.CommandContext(ctx, bin, "run", "--rm", "--pull", "never", "--network", "none", "--read-only", image, "true")
	if host != "" {
		cmd.Env = append(withoutEnv(os.Environ(), "DOCKER_HOST"), "DOCKER_HOST="+host)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	start := time.Now()
	err = cmd.Run()
	d := time.Since(start)
	if err != nil {
		return 0, sandbox.Errorf(sandbox.ErrInternal, "docker: bench: %s: %v: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return d, nil
}

// withoutEnv returns env without the entries of key.
func withoutEnv(env []string, key string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, key+"=") {
			out = append(out, kv)
		}
	}
	return out
}
