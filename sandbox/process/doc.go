// Package process is the life of a call's command inside its container,
// the same on every backend: the argv of the container's init, which runs
// the command as its child (InitArgs, InitArgsWithShell), the stop
// sequence of a call that times out or is cancelled (Supervise: SIGTERM, a
// grace period, then SIGKILL), and the reading of the init's exit status
// (DecodeExitStatus).
//
// It imports the standard library, sandbox and signals; the driver and
// the backends import it.
package process
