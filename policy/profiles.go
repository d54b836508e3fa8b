package policy

import (
	"errors"
	"io/fs"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// Names of the built-in profiles.
const (
	// ReadOnly mounts the workspace read-only.
	ReadOnly = "read-only"
	// WorkspaceWrite mounts the workspace read-write; it is the default.
	WorkspaceWrite = "workspace-write"
	// CI mounts the workspace read-write with larger limits: 4 GiB, 2
	// CPUs, 1024 tasks and a 600 s timeout.
	CI = "ci"
)

// Builtins returns the names of the built-in profiles, sorted.
func Builtins() []string {
	return []string{CI, ReadOnly, WorkspaceWrite}
}

// Builtin returns the built-in profile called name, resolved and
// digested, and whether there is one. Every call returns a fresh copy. No
// built-in uses the local backend: running without a container needs a
// policy file that says `backend: local`.
func Builtin(name string) (sandbox.Policy, bool) {
	p := defaults()
	switch name {
	case WorkspaceWrite:
	case ReadOnly:
		p.Name = ReadOnly
		p.Workspace = sandbox.WorkspaceRO
	case CI:
		p.Name = CI
		p.Workspace = sandbox.WorkspaceRW
		p.Limits.MemoryBytes = 4 << 30
		p.Limits.CPUs = 2
		p.Limits.Pids = 1024
		p.Limits.TimeoutMs = 600000
	default:
		return sandbox.Policy{}, false
	}
	return finish(p), true
}

// Load returns the built-in profile named nameOrFile, or else parses the
// policy file at that path, which must end in .yaml, .yml or .json and is
// opened as data (see LoadChecked): no link in its path, a regular file,
// at most MaxFileSize bytes. A file without a name key is named after the
// file ("strict.yaml" → "strict") when that is a valid name, else
// "custom". Errors wrap sandbox.ErrInvalid and name the file; an error
// reading it also wraps the os error (e.g. fs.ErrNotExist).
func Load(nameOrFile string) (sandbox.Policy, error) {
	return LoadChecked(nameOrFile, FileChecks{})
}

// unwrapPathError drops the *fs.PathError layer, whose message repeats
// the path, keeping the cause (which errors.Is still finds).
func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
