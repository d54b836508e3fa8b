package contributors

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// EnvHome is the environment variable ResolveHome consults when no
// explicit home is given.
const EnvHome = "DSH_HOME"

// DefaultHome is the home used when neither an explicit value nor
// $DSH_HOME is set; "~" is the user's home directory.
const DefaultHome = "~/.dsh"

// ResolveHome returns the absolute, cleaned dsh home: explicit when it is
// not blank, else $DSH_HOME when that is not blank, else DefaultHome. A
// leading "~" or "~/" is replaced by userHome(); the "~user" form is
// refused. A relative result is made absolute against the current
// directory.
//
// getenv defaults to os.Getenv and userHome to os.UserHomeDir when nil;
// userHome is called only when a "~" needs expanding. Errors name the
// source and the value.
func ResolveHome(explicit string, getenv func(string) string, userHome func() (string, error)) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if userHome == nil {
		userHome = os.UserHomeDir
	}
	source, value := "explicit home", explicit
	if blank(value) {
		source, value = "$"+EnvHome, getenv(EnvHome)
	}
	if blank(value) {
		source, value = "default home", DefaultHome
	}
	home, err := expandHome(value, userHome)
	if err != nil {
		return "", fmt.Errorf("contributors: %s %q: %w", source, value, err)
	}
	return home, nil
}

// HomeConflictError reports a top-level home and a nested (skills) home
// that are both configured and resolve to different directories.
type HomeConflictError struct {
	// Top and Nested are the configured values; TopPath and NestedPath
	// what they resolve to.
	Top, Nested         string
	TopPath, NestedPath string
}

func (e *HomeConflictError) Error() string {
	return fmt.Sprintf("contributors: conflicting dsh homes: top-level home %q (%s) and nested skills home %q (%s) differ; configure one, or make them agree",
		e.Top, e.TopPath, e.Nested, e.NestedPath)
}

// CheckHomes refuses two contradictory homes. When top and nested are both
// set (not blank) and, after "~" expansion (with os.UserHomeDir) and
// making them absolute, name different directories, it returns a
// *HomeConflictError naming both. The comparison is lexical: symbolic
// links are not followed, since the directories need not exist yet.
func CheckHomes(top, nested string) error {
	if blank(top) || blank(nested) {
		return nil
	}
	topPath, err := expandHome(top, os.UserHomeDir)
	if err != nil {
		return fmt.Errorf("contributors: top-level home %q: %w", top, err)
	}
	nestedPath, err := expandHome(nested, os.UserHomeDir)
	if err != nil {
		return fmt.Errorf("contributors: nested skills home %q: %w", nested, err)
	}
	if topPath != nestedPath {
		return &HomeConflictError{Top: top, Nested: nested, TopPath: topPath, NestedPath: nestedPath}
	}
	return nil
}

func blank(s string) bool { return strings.TrimSpace(s) == "" }

// expandHome replaces a leading "~" and makes p absolute and clean.
func expandHome(p string, userHome func() (string, error)) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", errors.New("contains a NUL byte")
	}
	if strings.HasPrefix(p, "~") {
		rest := p[1:]
		if rest != "" && rest[0] != '/' && rest[0] != filepath.Separator {
			return "", errors.New(`only "~" and "~/…" are expanded, not "~user"`)
		}
		dir, err := userHome()
		if err != nil {
			return "", fmt.Errorf("expanding ~: %w", err)
		}
		if blank(dir) {
			return "", errors.New("expanding ~: the user's home directory is unknown")
		}
		p = filepath.Join(dir, rest)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return abs, nil
}
