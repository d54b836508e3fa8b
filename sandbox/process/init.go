package process

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/signals"
)

// initRun is the container's pid 1 after the preamble of initScript: a
// POSIX shell that runs the command as its foreground child and exits
// with its status. It traps TERM so that it survives the SIGTERM a timeout
// sends to the container's processes and keeps waiting; the child gets
// SIGTERM as usual (a caught signal is reset to the default in the child).
// The child's stderr is the original one on fd 3; the init's own stderr
// goes to /dev/null so that its "Terminated" notice never reaches the
// command's output. The oci backend's init is the same, so every backend gives a
// command the same process tree and signal semantics.
const initRun = `trap : TERM; exec 3>&2 2>/dev/null; (exec "$@" 2>&3 3>&-); exit $?`

// pickShell sets the positional parameters to the command line: the
// image's bash when it has one, else /bin/sh, with -c and the command
// (the only parameter on entry). A daemon backend cannot look into the
// image before the container exists, so the init looks for itself.
const pickShell = `for b in /bin/bash /usr/bin/bash /usr/local/bin/bash; do ` +
	`if [ -f "$b" ] && [ -x "$b" ]; then set -- "$b" -c "$1"; break; fi; done; ` +
	`if [ "$#" -eq 1 ]; then set -- /bin/sh -c "$1"; fi; unset b; `

// initOwnedVars are the variables the init shell, the engine or the
// runtime may add or change before the command starts: the shell's own
// (PWD, OLDPWD, SHLVL, PATH, _), HOSTNAME (an engine adds it) and HOME
// (runc adds it when the env lacks it). initScript puts each back the way
// the call's env has it.
var initOwnedVars = []string{"PWD", "OLDPWD", "SHLVL", "PATH", "_", "HOSTNAME", "HOME"}

// initScript returns the init's script for a command whose environment
// is env. Only the values of initOwnedVars appear in it (they are
// restored from the command line); no other env value does.
func initScript(env []string) string {
	var b strings.Builder
	for _, name := range initOwnedVars {
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

// InitArgs is the argv of a container's pid 1 for backends that cannot
// look into the image first (docker, containerd): a /bin/sh init that
// runs req as its child, with the variables of initOwnedVars restored to
// env's values. req.Command runs under the image's bash (else /bin/sh)
// as `bash -c Command`; req.Argv, when set, is exec'd exactly as given,
// with no shell parsing it (the init's `exec "$@"` looks Argv[0] up in
// the restored PATH). No env value other than initOwnedVars' appears in
// the argv. The image must have /bin/sh.
func InitArgs(req *sandbox.Request, env []string) []string {
	if req.Argv != nil {
		return append([]string{"/bin/sh", "-c", initScript(env), "sh"}, req.Argv...)
	}
	return []string{"/bin/sh", "-c", pickShell + initScript(env), "sh", req.Command}
}

// InitArgsWithShell is InitArgs for a backend that knows the image's
// shell up front (the oci backend): the init runs shell -c req.Command,
// where an empty shell means /bin/sh, or req.Argv exactly. Every backend
// thus gives a command the same process tree, signal semantics and
// environment.
func InitArgsWithShell(shell string, req *sandbox.Request, env []string) []string {
	if req.Argv != nil {
		return append([]string{"/bin/sh", "-c", initScript(env), "sh"}, req.Argv...)
	}
	if shell == "" {
		shell = "/bin/sh"
	}
	return []string{"/bin/sh", "-c", initScript(env), "sh", shell, "-c", req.Command}
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

// maxSignal is the highest Linux signal number.
const maxSignal = 64

// DecodeExitStatus turns a container's exit status into a call's exit
// code or signal. The init exits with its child's status: an exit code as
// is, a death by signal N as 128+N. A status 129–192 naming a known signal
// is reported as that signal with a nil exit code (a command's own
// `exit 137` looks the same, as it does in $?).
func DecodeExitStatus(status int) (code *int, signal string) {
	if status > 128 && status <= 128+maxSignal {
		if name := signals.Name(syscall.Signal(status - 128)); name != "" {
			return nil, name
		}
	}
	return &status, ""
}
