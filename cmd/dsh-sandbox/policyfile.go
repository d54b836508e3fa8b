package main

import (
	"path/filepath"
	"strings"

	"github.com/dsh-sandbox/dsh-sandbox/internal/safefile"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// operatorPolicy loads the policy the operator names with --flag: a
// built-in profile, or a policy file that only the operator can have
// written (DESIGN §3.10, STYLE 18). Besides the checks every policy file
// gets (no link in its path, opened without blocking, a regular file of
// bounded size), the file must be owned by root or the invoking user, be
// writable by nobody else, and lie outside the workspace (withCwd: the
// session cwd) and every --workspace-roots directory, which sandboxed
// calls can write. Errors are usage errors naming the flag and the
// reason.
func (s *settings) operatorPolicy(flag, nameOrFile string, withCwd bool) (sandbox.Policy, error) {
	var outside []safefile.Dir
	if withCwd && s.cwd != "" {
		outside = append(outside, safefile.Dir{What: "the workspace", Path: s.cwd})
	}
	for _, r := range s.workspaceRoots {
		outside = append(outside, safefile.Dir{What: "workspace root", Path: r})
	}
	p, err := policy.LoadChecked(nameOrFile, policy.FileChecks{OperatorOwned: true, Outside: outside, Backends: backends.Names(nil)})
	if err != nil {
		return sandbox.Policy{}, usageError("--%s: %v", flag, err)
	}
	return p, nil
}

// isPolicyFile reports whether name is spelled as a policy file (a .yaml,
// .yml or .json name) rather than a policy's name.
func isPolicyFile(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}
