// Package hostpath resolves and creates the host paths a call mounts or
// writes (the workspace, the workdir, the session directory and its spill
// directory, policy mount sources) without following symbolic links:
// ResolveDir and ResolvePath check a path component by component,
// MkdirNoFollow, OpenDirNoFollow and CreateNoFollow create and open below
// a directory descriptor, SystemDir and Within say where a path lies,
// CheckDeployment refuses a workspace that holds what the service trusts,
// and MakeSessionDir creates the session directory for the harness user.
// A link an agent planted in its workspace can never redirect a mount or
// a write. The functions read the file system and are safe for concurrent
// use.
//
// It imports the standard library, sandbox (for its error classes and
// Owner) and acl; prepare, capture, policy and the CLI import it.
package hostpath
