// Package prepare turns a sandbox.Request into a sandbox.Call and gets its
// host paths ready, the first step of every backend's lifecycle: Validate
// checks a request with small named validators, Call resolves it against
// its policy (timeout, tail and spill sizes, workdir, the child's
// environment, the secrets to redact) and Paths resolves and checks every
// host path the call mounts or writes, creates the session directory and
// bounds the workspace's size (sandbox/quota), as late as a backend can
// before the runtime mounts them. NewCallID makes a call id.
//
// It imports the standard library, sandbox, childenv, secrets, hostpath
// and sandbox/quota; the driver and jobs import it.
package prepare
