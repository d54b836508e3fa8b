package sandboxtest

import (
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Subject is the backend under test: how the suite exercises it. The
// zero value is not valid: New and Policy are required.
//
// Executors under test must read the service environment (for
// Policy.EnvInherit) at call time, not when they are constructed: the
// suite changes the process environment with t.Setenv to plant stale
// DSH_* values and secret-shaped variables.
type Subject struct {
	// New returns a fresh executor. Run calls it once per top-level run
	// and shares the executor between cases; when the executor implements
	// io.Closer, Run closes it in a t.Cleanup after the last case. The
	// executor needs a pattern detector (driver.Service.Detector; the
	// tests' calls.Detector of internal/fixtures serves): the redaction
	// cases set redact.detectors, which an executor without one refuses.
	New func(t *testing.T) sandbox.Executor

	// Policy is the base policy every case starts from, normally the
	// built-in `workspace-write` resolved for the backend under test.
	// Cases copy it and change only what they test (workspace mode,
	// limits, env.inherit, …). Policy.Name and Policy.Backend must be
	// set; Result.Sandbox is checked against them.
	Policy sandbox.Policy

	// ImageEnv is the base environment of Policy.Image (layer 1 of DESIGN
	// §3.6) as KEY=VALUE, the same list the backend hands to
	// prepare.Call. The exact-env cases compute the expected child
	// environment from it with childenv.Build. Nil means an image with
	// an empty environment.
	ImageEnv []string

	// Leftovers lists this backend's objects still present on the host
	// (containers, bundles, cgroups, mounts, …), one human-readable entry
	// each. The leftover cases assert it returns nothing once calls have
	// returned. Nil means the backend has nothing to list (the local
	// baseline); the leftover checks are then logged as not done, and
	// the 200-call stress run still runs.
	Leftovers func(t *testing.T) []string

	// Isolated is true for container backends. False marks the `local`
	// baseline (no container): the cases that need isolation (namespaces,
	// capabilities, seccomp, read-only root, mounts, limits) are skipped
	// with a message, and everything else runs unchanged.
	Isolated bool

	// OwnKernel is true when calls run on a kernel the runtime
	// implements in user space (gVisor's Sentry under runsc) instead of
	// the host's. The hardening cases then expect that kernel's answers
	// where it differs by nature from the host's: a socket family it does
	// not implement (AF_VSOCK) fails with EAFNOSUPPORT as well as with
	// the seccomp profile's EPERM, and /proc/cmdline may show the
	// runtime's own synthetic boot line instead of being masked, as long
	// as it is not the host's. False means the host kernel (runc, crun,
	// the Docker engine, containerd), where only EPERM and a masked,
	// empty file pass.
	OwnKernel bool

	// NotApplicable names the cases that cannot apply to the backend,
	// each with the reason, which must be a property of the platform the
	// backend runs on (a pod API without the field, a node without the
	// kernel feature), never a failure to fix. Run does not run them and
	// logs them with their reasons; a name that is not a case fails the
	// run, so a renamed case is not silently skipped.
	NotApplicable map[string]string
}
