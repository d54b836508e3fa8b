package contributors

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"unicode"
)

// EnvHome is the environment variable ResolveHome consults when no
// explicit home is given.
const EnvHome = "DSH_HOME"

// DefaultHome is the home used when neither an explicit value nor
// $DSH_HOME is set; "~" is the user's home directory.
const DefaultHome = "~/.dsh"

// ResolveHome returns the absolute, cleaned dsh home exactly as dsh's
// resolveDshHome (@deepseek-ai/dsh-home-paths) computes it: explicit when
// it is not empty, else $DSH_HOME when that is not blank (blank by
// JavaScript's trim, which counts U+FEFF and not U+0085), else
// DefaultHome. "~" alone, or a leading "~/" or "~\", is replaced by the
// user's home directory (userHome); any other value, "~user" included, is
// taken as a path. A relative result is made absolute against the process's
// working directory (getcwd, as Node's process.cwd).
//
// getenv defaults to os.Getenv and userHome to UserHome when nil; userHome
// is called only when a "~" needs expanding. Errors name the source and
// the value. An explicit "" means "not given" (dsh, which can tell an
// empty value from an absent one, would resolve "" to the working
// directory).
func ResolveHome(explicit string, getenv func(string) string, userHome func() (string, error)) (string, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if userHome == nil {
		userHome = UserHome
	}
	source, value := "explicit home", explicit
	if value == "" {
		source, value = "$"+EnvHome, getenv(EnvHome)
		if blank(value) {
			source, value = "default home", DefaultHome
		}
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

// UserHome is the user's home directory as Node's os.homedir() gives it:
// $HOME when the variable is set, even to "", else the home directory of
// the user's passwd entry.
func UserHome() (string, error) {
	if v, ok := os.LookupEnv("HOME"); ok {
		return v, nil
	}
	u, err := user.Current()
	if err != nil {
		return "", fmt.Errorf("the user's home directory: $HOME is unset and %w", err)
	}
	return u.HomeDir, nil
}

// CheckHomes refuses two contradictory homes. When top and nested are both
// set (not blank) and, after "~" expansion (with UserHome) and
// making them absolute, name different directories, it returns a
// *HomeConflictError naming both. The comparison is lexical: symbolic
// links are not followed, since the directories need not exist yet.
func CheckHomes(top, nested string) error {
	if blank(top) || blank(nested) {
		return nil
	}
	topPath, err := expandHome(top, UserHome)
	if err != nil {
		return fmt.Errorf("contributors: top-level home %q: %w", top, err)
	}
	nestedPath, err := expandHome(nested, UserHome)
	if err != nil {
		return fmt.Errorf("contributors: nested skills home %q: %w", nested, err)
	}
	if topPath != nestedPath {
		return &HomeConflictError{Top: top, Nested: nested, TopPath: topPath, NestedPath: nestedPath}
	}
	return nil
}

// blank reports whether s is empty after JavaScript's String.prototype.trim.
func blank(s string) bool { return strings.TrimFunc(s, jsSpace) == "" }

// jsSpace is JavaScript's WhiteSpace and LineTerminator: unicode.IsSpace
// less U+0085, plus U+FEFF.
func jsSpace(r rune) bool {
	switch r {
	case '\u0085':
		return false
	case '\uFEFF':
		return true
	}
	return unicode.IsSpace(r)
}

// expandHome expands "~", "~/…" and "~\\…" as dsh's expandHomePath does
// and makes p absolute and clean against the process's working directory.
func expandHome(p string, userHome func() (string, error)) (string, error) {
	if strings.ContainsRune(p, 0) {
		return "", errors.New("contains a NUL byte")
	}
	if p == "~" || strings.HasPrefix(p, "~/") || strings.HasPrefix(p, "~\\") {
		dir, err := userHome()
		if err != nil {
			return "", fmt.Errorf("expanding ~: %w", err)
		}
		p = filepath.Join(dir, p[min(len(p), 2):])
	}
	if filepath.IsAbs(p) {
		return filepath.Clean(p), nil
	}
	wd, err := syscall.Getwd()
	if err != nil {
		return "", fmt.Errorf("the working directory: %w", err)
	}
	return filepath.Join(wd, p), nil
}
