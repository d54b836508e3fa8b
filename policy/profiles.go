package policy

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

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
		p.Workspace = "ro"
	case CI:
		p.Name = CI
		p.Workspace = "rw"
		p.Limits.MemoryBytes = 4 << 30
		p.Limits.CPUs = 2
		p.Limits.Pids = 1024
		p.Limits.TimeoutMs = 600000
	default:
		return sandbox.Policy{}, false
	}
	return finish(p), true
}

// fileExtensions are the suffixes Load reads as policy files.
var fileExtensions = []string{".yaml", ".yml", ".json"}

// Load returns the built-in profile named nameOrFile, or else parses the
// policy file at that path, which must end in .yaml, .yml or .json, be a
// regular file and hold at most MaxFileSize bytes. A file without a name
// key is named after the file ("strict.yaml" → "strict") when that is a
// valid name, else "custom". Errors wrap sandbox.ErrInvalid and name the
// file; an error reading it also wraps the os error (e.g. fs.ErrNotExist).
func Load(nameOrFile string) (sandbox.Policy, error) {
	if p, ok := Builtin(nameOrFile); ok {
		return p, nil
	}
	ext := strings.ToLower(filepath.Ext(nameOrFile))
	if !slices.Contains(fileExtensions, ext) {
		return sandbox.Policy{}, invalidf("%q is neither a built-in profile (%s) nor a .yaml, .yml or .json file",
			nameOrFile, strings.Join(Builtins(), ", "))
	}
	data, err := readFile(nameOrFile)
	if err != nil {
		return sandbox.Policy{}, err
	}
	name := strings.TrimSuffix(filepath.Base(nameOrFile), filepath.Ext(nameOrFile))
	if validName(name) != nil {
		name = "custom"
	}
	return parse(data, name, "policy file "+nameOrFile)
}

// readFile reads a policy file, refusing anything but a regular file and
// reading at most one byte past MaxFileSize.
func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "policy file %s: %w", path, unwrapPathError(err))
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "policy file %s: %w", path, unwrapPathError(err))
	}
	if !info.Mode().IsRegular() {
		return nil, invalidf("file %s is not a regular file", path)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "policy file %s: %w", path, unwrapPathError(err))
	}
	if len(data) > MaxFileSize {
		return nil, invalidf("file %s is larger than %d bytes", path, MaxFileSize)
	}
	return data, nil
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
