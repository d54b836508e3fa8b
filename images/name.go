package images

import (
	"fmt"
	"strings"
)

// Image names follow the Docker engine's reference grammar, so that one
// name means one image on every backend (the local store, the engine,
// containerd):
//
//	name       := [domain "/"] component ("/" component)* [":" tag]
//	domain     := host [":" port]   host: labels of [A-Za-z0-9-] joined by "."
//	component  := [a-z0-9]+ ((("." | "_" | "__" | "-"+) [a-z0-9]+))*
//	tag        := [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}
//
// The first part is a domain when it holds "." or ":" or is "localhost".
// The repository (everything before the tag) is at most 255 bytes.
// Names (ValidateName, CanonicalName) have no digest: that is how images
// are imported and named on every backend. A reference ([ParseReference],
// what [Store.AddRemote] and [Store.Get] take) may instead end in a digest,
// "name@sha256:<64 lowercase hex>", naming exactly one image by content.
//
// The canonical form, which stores, lists and lookups use, has a tag
// ("latest" when none is given) and drops the Docker Hub prefixes the
// engine drops too: "docker.io/library/bb2" and "bb2" are both
// "bb2:latest", "docker.io/myorg/tools:1" is "myorg/tools:1".

// defaultTag is the tag of a name given without one.
const defaultTag = "latest"

// maxTag bounds the tag; maxRepository the repository with its domain.
const (
	maxTag        = 128
	maxRepository = 255
)

// hubDomains are the prefixes that name Docker Hub, which the canonical
// form leaves out; officialPrefix is Docker Hub's namespace of official
// images, also left out.
var hubDomains = []string{"docker.io/", "index.docker.io/", "registry-1.docker.io/"}

const officialPrefix = "library/"

// ValidateName checks an image name against the grammar above. "host" is
// a valid name (it names the host image); a stored image may not use
// it. The error wraps [ErrInvalid], quotes the name and says which part
// is wrong.
func ValidateName(name string) error {
	_, _, err := splitName(name, false)
	return err
}

// CanonicalName returns name in the form images are stored and listed by
// on every backend: "repository:tag", with the tag "latest" when name
// has none and without the Docker Hub prefixes. The host image's name
// "host" is returned unchanged.
func CanonicalName(name string) (string, error) {
	repo, tag, err := splitName(name, false)
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

// CanonicalReference is CanonicalName for a reference that may end in a
// digest: "x@sha256:…" (a tag beside the digest is dropped) or
// "repository:tag".
func CanonicalReference(ref string) (string, error) {
	repo, tag, err := splitName(ref, true)
	if err != nil {
		return "", err
	}
	if repo == HostName && tag == "" {
		return "", fmt.Errorf("%w: name %q is the generated host image, which is never pulled", ErrInvalid, ref)
	}
	if tag == "" {
		tag = defaultTag
	}
	return refString(repo, tag), nil
}

// splitName validates name and returns its repository, in canonical form
// (without Docker Hub prefixes), and its tag ("" when absent). With
// digest true the tag may instead be a digest, returned with its
// "@" ("@sha256:…"); otherwise a digest is refused.
func splitName(name string, digest bool) (repo, tag string, err error) {
	bad := func(format string, args ...any) (string, string, error) {
		return "", "", fmt.Errorf("%w: name %q: %s", ErrInvalid, name, fmt.Sprintf(format, args...))
	}
	if before, d, ok := strings.Cut(name, "@"); ok {
		if !digest {
			return bad("digest references are not supported here; images are imported and named by repository[:tag] (images pull takes NAME@sha256:…)")
		}
		if !validDigest(d) {
			return bad("digest must be sha256: followed by 64 lowercase hex digits")
		}
		// A tag beside the digest ("golang:1.26@sha256:…") is
		// informational: the digest alone names the image.
		if i := strings.LastIndexByte(before, ':'); i > strings.LastIndexByte(before, '/') {
			if !validTag(before[i+1:]) {
				return bad("tag must match [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
			}
			before = before[:i]
		}
		repo, _, err := splitName(before, false)
		if err != nil {
			return "", "", err
		}
		if repo == HostName {
			return bad("%q is reserved for the generated host image", HostName)
		}
		return repo, "@" + d, nil
	}
	repo = name
	// The tag follows the last ":" after the last "/" (a ":" before a
	// "/" is a registry port).
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		repo, tag = name[:i], name[i+1:]
		if !validTag(tag) {
			return bad("tag must match [A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
		}
	}
	if repo == "" {
		return bad("the repository is empty")
	}
	if len(repo) > maxRepository {
		return bad("the repository is %d bytes, more than %d", len(repo), maxRepository)
	}
	parts := strings.Split(repo, "/")
	path := parts
	if len(parts) > 1 && isDomain(parts[0]) {
		if !validDomain(parts[0]) {
			return bad("registry %q must be a host name of letters, digits, '-' and '.', optionally with :PORT", parts[0])
		}
		path = parts[1:]
	}
	for _, c := range path {
		if !validComponent(c) {
			return bad("repository part %q must be lowercase letters and digits, separated by '.', '_', '__' or '-'", c)
		}
	}
	return familiar(repo), tag, nil
}

// familiar drops the Docker Hub domain and its official-images namespace
// from a valid repository, unless what remains would read as another
// registry ("docker.io/foo.bar/x" stays).
func familiar(repo string) string {
	for _, d := range hubDomains {
		rest, ok := strings.CutPrefix(repo, d)
		if !ok {
			continue
		}
		if first, _, nested := strings.Cut(rest, "/"); nested && isDomain(first) {
			return repo
		}
		repo = rest
		break
	}
	// A repository whose first part is not a registry is on Docker Hub.
	if rest, ok := strings.CutPrefix(repo, officialPrefix); ok && !strings.Contains(rest, "/") {
		repo = rest
	}
	return repo
}

// isDomain reports whether the first part of a repository names a
// registry rather than a namespace.
func isDomain(s string) bool {
	return strings.ContainsAny(s, ".:") || s == "localhost" || strings.ToLower(s) != s
}

// validDomain checks host[:port].
func validDomain(s string) bool {
	host, port, hasPort := strings.Cut(s, ":")
	if hasPort && (port == "" || len(port) > 5 || strings.Trim(port, "0123456789") != "") {
		return false
	}
	for _, label := range strings.Split(host, ".") {
		if label == "" || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			if c := label[i]; !isAlnum(c) && !('A' <= c && c <= 'Z') && c != '-' {
				return false
			}
		}
	}
	return true
}

// validComponent checks one path component of a repository.
func validComponent(s string) bool {
	if s == "" || !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); {
		if isAlnum(s[i]) {
			i++
			continue
		}
		// A separator: ".", "_", "__" or a run of "-", between
		// alphanumerics (the ends are checked above).
		j := i
		for j < len(s) && !isAlnum(s[j]) {
			j++
		}
		switch sep := s[i:j]; {
		case sep == ".", sep == "_", sep == "__", strings.Trim(sep, "-") == "":
		default:
			return false
		}
		i = j
	}
	return true
}

// validDigest checks "sha256:" plus 64 lowercase hex digits, the only
// digest algorithm registries and the stores use.
func validDigest(s string) bool {
	hex, ok := strings.CutPrefix(s, "sha256:")
	return ok && len(hex) == 64 && strings.Trim(hex, "0123456789abcdef") == ""
}

func isAlnum(c byte) bool { return 'a' <= c && c <= 'z' || '0' <= c && c <= '9' }

func validTag(s string) bool {
	if len(s) == 0 || len(s) > maxTag {
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

// Directory names of repositories in a [Store]: "/" and ":" (a registry
// port) cannot appear in one directory name, and ":" not in an overlay
// lower directory either, so they are replaced by characters no valid
// name holds.
const (
	dirSlash = "+"
	dirColon = "~"
)

// repoDir is the directory name of a canonical repository.
func repoDir(repo string) string {
	return strings.ReplaceAll(strings.ReplaceAll(repo, "/", dirSlash), ":", dirColon)
}

// dirRepo is the canonical repository a directory name of the store
// stands for; false when it stands for none.
func dirRepo(dir string) (string, bool) {
	repo := strings.ReplaceAll(strings.ReplaceAll(dir, dirSlash, "/"), dirColon, ":")
	r, tag, err := splitName(repo, false)
	if err != nil || tag != "" || r != repo || repoDir(repo) != dir {
		return "", false
	}
	return repo, true
}
