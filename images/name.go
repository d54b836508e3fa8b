package images

import (
	"fmt"
	"strings"
)

// defaultTag is the tag of a name given without one.
const defaultTag = "latest"

// maxNamePart bounds the repository and the tag, each.
const maxNamePart = 128

// ValidateName checks an image name: a repository matching
// [a-z0-9][a-z0-9._-]{0,127}, optionally followed by ":" and a tag
// matching [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}. "host" is a valid name (it
// names the host image); a stored image may not use it. The error wraps
// [ErrInvalid] and quotes the name.
func ValidateName(name string) error {
	_, _, err := splitName(name)
	return err
}

// CanonicalName returns name in the form stored images are known by:
// "repository:tag", with the tag "latest" when name has none. The host
// image's name "host" is returned unchanged.
func CanonicalName(name string) (string, error) {
	repo, tag, err := splitName(name)
	if err != nil {
		return "", err
	}
	if repo == HostName && tag == "" {
		return HostName, nil
	}
	if tag == "" {
		tag = defaultTag
	}
	return repo + ":" + tag, nil
}

// splitName validates name and returns its repository and tag ("" when
// absent).
func splitName(name string) (repo, tag string, err error) {
	repo, tag, hasTag := strings.Cut(name, ":")
	if !validRepository(repo) {
		return "", "", fmt.Errorf("%w: name %q: repository must match [a-z0-9][a-z0-9._-]{0,127}", ErrInvalid, name)
	}
	if hasTag && !validTag(tag) {
		return "", "", fmt.Errorf("%w: name %q: tag must match [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}", ErrInvalid, name)
	}
	return repo, tag, nil
}

func validRepository(s string) bool {
	if len(s) == 0 || len(s) > maxNamePart {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case i > 0 && (c == '.' || c == '_' || c == '-'):
		default:
			return false
		}
	}
	return true
}

func validTag(s string) bool {
	if len(s) == 0 || len(s) > maxNamePart {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '_':
		case i > 0 && (c == '.' || c == '-'):
		default:
			return false
		}
	}
	return true
}
