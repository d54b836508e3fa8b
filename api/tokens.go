package api

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// TokenFileHelp describes the token file format, for flag help and docs.
const TokenFileHelp = `one client per line, NAME TOKEN [ROOTS] [harness] separated by blanks:
NAME is 1–64 of [A-Za-z0-9._-], TOKEN has no blanks, ROOTS is a colon-separated list of
absolute directories the client's workspaces must lie in (absent: only --workspace-roots
apply), the word harness makes the client an authenticated harness that may add its own
DSH_* keys (beyond the service's) to a call's environment; '#' starts a comment line. A file
holding one word is the token of a single client named "token" (not a harness). The file
must have mode 0600 (no group or other bits).`

// MaxTokenFileBytes bounds a token file.
const MaxTokenFileBytes = 64 << 10

// TokenClient is one client of a TCP listener: the bearer token it sends
// and the identity and scope that token gives it.
type TokenClient struct {
	// Name identifies the client in logs, the audit log and session
	// ownership; unique within a file.
	Name string
	// Token is the bearer token; unique within a file.
	Token string
	// Roots are the clean absolute directories the client's workspaces
	// must lie in, on top of the service's; nil means no roots of its
	// own.
	Roots []string
	// Harness makes the client an authenticated harness (Client.Harness);
	// false means it may not send DSH_* keys beyond the service's.
	Harness bool
}

// HarnessWord marks a harness client in a token file line.
const HarnessWord = "harness"

// LegacyTokenName is the client name of a token file holding one word.
const LegacyTokenName = "token"

var tokenName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// ParseTokens parses the content of a token file (see TokenFileHelp).
// Errors name the line; tokens never appear in them.
func ParseTokens(data []byte) ([]TokenClient, error) {
	var lines [][]string
	var numbers []int
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		lines = append(lines, strings.Fields(line))
		numbers = append(numbers, i+1)
	}
	if len(lines) == 0 {
		return nil, fmt.Errorf("no token in it")
	}
	if len(lines) == 1 && len(lines[0]) == 1 {
		return []TokenClient{{Name: LegacyTokenName, Token: lines[0][0]}}, nil
	}
	names, tokens := map[string]bool{}, map[string]bool{}
	out := make([]TokenClient, 0, len(lines))
	for i, f := range lines {
		n := numbers[i]
		if len(f) < 2 || len(f) > 4 {
			return nil, fmt.Errorf("line %d: want NAME TOKEN [ROOTS] [%s], got %d fields", n, HarnessWord, len(f))
		}
		tc := TokenClient{Name: f[0], Token: f[1]}
		if !tokenName.MatchString(tc.Name) {
			return nil, fmt.Errorf("line %d: client name %q is not 1–64 of [A-Za-z0-9._-]", n, tc.Name)
		}
		if names[tc.Name] {
			return nil, fmt.Errorf("line %d: client name %q appears twice", n, tc.Name)
		}
		if tokens[tc.Token] {
			return nil, fmt.Errorf("line %d: client %q has the token of an earlier line", n, tc.Name)
		}
		names[tc.Name], tokens[tc.Token] = true, true
		if f[len(f)-1] == HarnessWord && len(f) > 2 {
			tc.Harness = true
			f = f[:len(f)-1]
		}
		if len(f) == 4 {
			return nil, fmt.Errorf("line %d: client %q: the fourth field may only be %q", n, tc.Name, HarnessWord)
		}
		if len(f) == 3 {
			for _, r := range strings.Split(f[2], ":") {
				if !filepath.IsAbs(r) || strings.ContainsRune(r, 0) {
					return nil, fmt.Errorf("line %d: client %q: root %q is not an absolute path", n, tc.Name, r)
				}
				tc.Roots = append(tc.Roots, filepath.Clean(r))
			}
		}
		out = append(out, tc)
	}
	return out, nil
}

// ReadTokens reads a token file (see TokenFileHelp) that only its owner
// may read, as ReadToken does.
func ReadTokens(path string) ([]TokenClient, error) {
	data, err := readPrivate(path, MaxTokenFileBytes)
	if err != nil {
		return nil, err
	}
	tcs, err := ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("token file %s: %v", path, err)
	}
	return tcs, nil
}

// readPrivate reads a regular file of at most max bytes that has no
// group or other permission bits.
func readPrivate(path string, max int) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("token file %s is not a regular file", path)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("token file %s has mode %v: others can read it; chmod 600 it", path, fi.Mode().Perm())
	}
	buf := make([]byte, max+1)
	n := 0
	for n < len(buf) {
		m, err := f.Read(buf[n:])
		n += m
		if err != nil {
			break
		}
	}
	if n > max {
		return nil, fmt.Errorf("token file %s is larger than %d bytes", path, max)
	}
	return buf[:n], nil
}
