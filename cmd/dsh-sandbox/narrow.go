package main

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/childenv"
)

// maxEnvFileBytes bounds an --env-file.
const maxEnvFileBytes = 1 << 20

// narrowFlags are the per-call flags of `exec` that narrow the policy
// (policy.Narrow); --timeout is declared with the other exec flags.
func narrowFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "memory", Usage: "memory limit `SIZE` of this call (e.g. 512Mi); at most the policy's"},
		&cli.Float64Flag{Name: "cpus", Usage: "CPU quota of this call in cores (e.g. 0.5); at most the policy's"},
		&cli.Int64Flag{Name: "pids", Usage: "task limit of this call; at most the policy's"},
		&cli.StringFlag{Name: "workspace-bytes", Usage: "bound the workspace to `SIZE` in all (e.g. 2Gi; btrfs qgroups or project quotas); at most the policy's limits.workspaceBytes; a workspace where neither is enforced refuses the call"},
		&cli.StringFlag{Name: "network", Usage: "network of this call: none, or loopback under a loopback policy"},
		&cli.StringSliceFlag{Name: "mount", Usage: "bind mount `SRC:DST[:ro]` (repeatable); SRC must lie below one of the policy's mountRoots (read-write only under a rw root), resolve without links and hold no path the service trusts"},
		&cli.StringFlag{Name: "env-file", Usage: "read ordinary environment from `FILE`: KEY=VALUE lines, # comments; DSH_* keys are dropped"},
	}
}

// narrowFlagNames maps a policy.Narrowing field to the flag that sets it.
var narrowFlagNames = map[string]string{
	"memoryBytes": "--memory", "cpus": "--cpus", "pids": "--pids",
	"timeoutMs": "--timeout", "network": "--network", "mounts": "--mount",
	"workspaceBytes": "--workspace-bytes",
}

// narrowing reads the per-call flags. Values are checked for form here
// and against the policy by policy.Narrow (narrowPolicy).
func narrowing(c *cli.Context) (policy.Narrowing, error) {
	var n policy.Narrowing
	var err error
	if n.MemoryBytes, err = sizeFlag(c, "memory"); err != nil {
		return n, err
	}
	if c.IsSet("cpus") {
		if v := c.Float64("cpus"); v <= 0 || v != v {
			return n, usageError("--cpus: must be positive, got %v", v)
		} else {
			n.CPUs = v
		}
	}
	if c.IsSet("pids") {
		if v := c.Int64("pids"); v <= 0 {
			return n, usageError("--pids: must be positive, got %d", v)
		} else {
			n.Pids = v
		}
	}
	if c.IsSet("timeout") {
		d := c.Duration("timeout")
		if d <= 0 {
			return n, usageError("--timeout: must be positive, got %s", d)
		}
		n.TimeoutMs = max(d.Milliseconds(), 1)
	}
	if n.WorkspaceBytes, err = sizeFlag(c, "workspace-bytes"); err != nil {
		return n, err
	}
	if c.IsSet("network") {
		n.Network = sandbox.NetworkMode(c.String("network"))
		if n.Network == "" {
			return n, usageError("--network: must not be empty")
		}
	}
	for _, spec := range c.StringSlice("mount") {
		m, err := parseMount(spec)
		if err != nil {
			return n, usageError("--mount: %v", err)
		}
		n.Mounts = append(n.Mounts, m)
	}
	return n, nil
}

// sizeFlag is the positive size of flag name (policy.ParseSize), 0 when
// it is not set.
func sizeFlag(c *cli.Context, name string) (int64, error) {
	if !c.IsSet(name) {
		return 0, nil
	}
	v, err := policy.ParseSize(c.String(name))
	if err != nil || v == 0 {
		if err == nil {
			err = errors.New("must be positive")
		}
		return 0, usageError("--%s: %v", name, err)
	}
	return v, nil
}

// parseMount reads SRC:DST[:ro|rw]; both paths absolute.
func parseMount(spec string) (sandbox.Mount, error) {
	parts := strings.Split(spec, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return sandbox.Mount{}, fmt.Errorf("%q is not SRC:DST[:ro]", spec)
	}
	m := sandbox.Mount{Source: parts[0], Target: parts[1]}
	if len(parts) == 3 {
		switch parts[2] {
		case "ro":
			m.ReadOnly = true
		case "rw":
		default:
			return sandbox.Mount{}, fmt.Errorf("%q: the mode is ro or rw, not %q", spec, parts[2])
		}
	}
	for _, p := range []string{m.Source, m.Target} {
		if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) {
			return sandbox.Mount{}, fmt.Errorf("%q: %q is not an absolute path", spec, p)
		}
	}
	return m, nil
}

// readEnvFile reads an --env-file: KEY=VALUE lines (the value taken as
// written, up to the end of the line), blank lines and lines starting
// with # ignored. A DSH_* key is dropped, as the trusted snapshot alone
// sets those; its name goes to warn. A malformed line or a NUL byte is
// refused naming the line number; values never appear in messages.
func readEnvFile(path string, warn func(format string, args ...any)) ([]string, error) {
	data, err := readBounded(path, maxEnvFileBytes)
	if err != nil {
		return nil, usageError("--env-file: %v", err)
	}
	return parseEnvFile(path, data, warn)
}

func parseEnvFile(path string, data []byte, warn func(format string, args ...any)) ([]string, error) {
	var env []string
	for i, line := range bytes.Split(data, []byte("\n")) {
		where := fmt.Sprintf("--env-file %s:%d", path, i+1)
		if bytes.IndexByte(line, 0) >= 0 {
			return nil, usageError("%s: contains a NUL byte", where)
		}
		text := strings.TrimSuffix(string(line), "\r")
		if trimmed := strings.TrimSpace(text); trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		name, _, ok := strings.Cut(text, "=")
		if !ok || !envName(name) {
			return nil, usageError("%s: not KEY=VALUE (KEY of letters, digits and _, not starting with a digit)", where)
		}
		if childenv.IsDSHName(name) {
			warn("%s: %s dropped: DSH_* variables come only from the trusted snapshot", where, name)
			continue
		}
		env = append(env, text)
	}
	return env, nil
}

// envName reports whether s is a portable environment variable name.
func envName(s string) bool {
	if s == "" || (s[0] >= '0' && s[0] <= '9') {
		return false
	}
	for _, r := range s {
		if r != '_' && (r < 'A' || r > 'Z') && (r < 'a' || r > 'z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// warnf writes a warning line to the CLI's stderr.
func warnf(c *cli.Context) func(format string, args ...any) {
	return func(format string, args ...any) {
		fmt.Fprintf(c.App.ErrWriter, "dsh-sandbox: warning: "+format+"\n", args...)
	}
}

// narrowRun puts n in a request to the service, which narrows its own
// policy (the CLI does not know it); the timeout goes in TimeoutMs, which
// the service clamps to its policy's maximum.
func narrowRun(rr *types.RunRequest, n policy.Narrowing) {
	rr.MemoryBytes, rr.CPUs, rr.Pids = n.MemoryBytes, n.CPUs, n.Pids
	rr.Network, rr.Mounts = string(n.Network), n.Mounts
}
