package oci

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// initRun is the heart of the container's pid 1: a POSIX shell that runs
// the command as its child and exits with the child's status. The
// command's shell must not be pid 1 of the pid namespace, where the
// kernel drops every signal it has no handler for (kill -TERM $$ would do
// nothing), and pid 1 must outlive it so that its death takes every
// other process of the call with it.
//
//   - trap : TERM: the init survives the SIGTERM that a timeout sends to
//     every process of the container (gVisor delivers it to pid 1 too)
//     and keeps waiting; a caught signal is reset to the default in the
//     child, so the command sees SIGTERM as usual, and a command that
//     ignores it is SIGKILLed after the grace period.
//   - The child runs in the foreground (a background job would start with
//     SIGINT and SIGQUIT ignored, for good) in a subshell that execs it,
//     with the original stderr on fd 3 while the init's own stderr goes to
//     /dev/null: the init's "Terminated" notice of a killed child never
//     reaches the command's stderr, and fd 3 does not reach the command.
const initRun = `trap : TERM; exec 3>&2 2>/dev/null; (exec "$@" 2>&3 3>&-); exit $?`

// shellOwnedVars are the variables an init shell sets or changes on
// start-up (dash exports PWD; busybox sh also SHLVL and a default PATH).
var shellOwnedVars = []string{"PWD", "OLDPWD", "SHLVL", "PATH", "_"}

// initScript returns the init's script for a command whose environment
// is env: it first puts every shell-owned variable back the way env has
// it (unset when env lacks it), so that the command's shell starts with
// exactly env. The values restored this way (PWD, OLDPWD, SHLVL, PATH, _)
// appear in the init's command line; no other value does.
func initScript(env []string) string {
	var b strings.Builder
	for _, name := range shellOwnedVars {
		v, ok := lookupEnv(env, name)
		if !ok {
			fmt.Fprintf(&b, "unset %s; ", name)
			continue
		}
		fmt.Fprintf(&b, "%s=%s; export %s; ", name, shellQuote(v), name)
	}
	b.WriteString(initRun)
	return b.String()
}

// lookupEnv finds name in a KEY=VALUE list (the last entry wins).
func lookupEnv(env []string, name string) (string, bool) {
	val, found := "", false
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == name {
			val, found = v, true
		}
	}
	return val, found
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// initArgs returns the container's argv: the init shell running shell
// (the image's bash, or /bin/sh) with -c command, for the environment env.
func initArgs(bash, command string, env []string) []string {
	return append([]string{"/bin/sh", "-c", initScript(env), "sh"}, shellArgs(bash, command)...)
}

// decodeStatus turns the wait status of the runtime's `run` process into
// the call's exit code or signal.
//
// runc, crun and runsc all exit with the container's status, and the init
// shell exits with its child's: an exit code as is, a death by signal N as
// 128+N. A status 129–192 naming a known signal is therefore reported as
// that signal, with a nil exit code — which is also how a command that
// itself ends with `exit 137` is reported: the two are indistinguishable
// at the runtime boundary, exactly as they are in a shell's $?. A
// runtime process killed by a signal itself (the backend kills it only
// when the container never appeared) is reported as that signal.
func decodeStatus(ws syscall.WaitStatus) (code *int, signal string) {
	if ws.Signaled() {
		return nil, sandbox.SignalName(ws.Signal())
	}
	return sandbox.DecodeExitStatus(ws.ExitStatus())
}
