package images

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// maxAuthFile bounds the credentials file.
const maxAuthFile = 1 << 20

// Registries is the operator's configuration of the registries images
// are pulled from: credentials per registry, read from a docker-style
// config.json, and the registries that may be reached over plain HTTP.
// Nothing in it ever comes from a request. The zero value pulls
// anonymously over HTTPS only. A Registries is read-only after
// [LoadRegistries] and safe for concurrent use.
type Registries struct {
	// auths maps a registry host[:port] to its credentials.
	auths map[string]Auth
	// insecure lists the host[:port] reached over plain HTTP.
	insecure []string
	// Transport is the HTTP transport of pulls under their scheme check
	// (images/registry); nil means a clone of http.DefaultTransport with
	// bounded dial and handshake times. Tests set it.
	Transport http.RoundTripper
}

// Auth is the operator's credentials for one registry: a user and
// password, or an identity or registry token (the fields of a docker
// config.json's auths entry).
type Auth struct {
	Username      string
	Password      string
	IdentityToken string
	RegistryToken string
}

// dockerConfig is the part of a docker config.json Registries reads.
type dockerConfig struct {
	Auths map[string]struct {
		Auth          string `json:"auth"`
		Username      string `json:"username"`
		Password      string `json:"password"`
		IdentityToken string `json:"identitytoken"`
		RegistryToken string `json:"registrytoken"`
	} `json:"auths"`
	CredsStore  string            `json:"credsStore"`
	CredHelpers map[string]string `json:"credHelpers"`
}

// LoadRegistries reads the credentials of authFile ("" means none), a
// docker-style config.json whose "auths" map a registry (host[:port],
// optionally written as a URL such as "https://index.docker.io/v1/") to
// {"auth": base64("user:password")}, {"username", "password"},
// {"identitytoken"} or {"registrytoken"}; and takes insecure, the
// registries (host[:port]) that may be reached over plain HTTP. A file
// that relies on credential helpers (credsStore, credHelpers) is refused:
// they run programs, and the sandbox's operator names credentials
// explicitly. Errors wrap [ErrInvalid] and name the file and the entry;
// they never quote a secret.
func LoadRegistries(authFile string, insecure []string) (*Registries, error) {
	r := &Registries{auths: map[string]Auth{}}
	for _, h := range insecure {
		if h == "" || !validDomain(h) {
			return nil, fmt.Errorf("%w: insecure registry %q: want host[:port]", ErrInvalid, h)
		}
		r.insecure = append(r.insecure, strings.ToLower(h))
	}
	if authFile == "" {
		return r, nil
	}
	f, err := os.Open(authFile)
	if err != nil {
		return nil, fmt.Errorf("registry credentials: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxAuthFile+1))
	if err != nil {
		return nil, fmt.Errorf("registry credentials %s: %w", authFile, err)
	}
	if len(data) > maxAuthFile {
		return nil, fmt.Errorf("%w: registry credentials %s: larger than %d bytes", ErrInvalid, authFile, maxAuthFile)
	}
	var cfg dockerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		// The decoder's message may quote the file: say only where.
		return nil, fmt.Errorf("%w: registry credentials %s: not a docker config.json (JSON object with \"auths\")", ErrInvalid, authFile)
	}
	if cfg.CredsStore != "" || len(cfg.CredHelpers) > 0 {
		return nil, fmt.Errorf("%w: registry credentials %s: credential helpers (credsStore, credHelpers) are not supported; write the credentials into \"auths\"", ErrInvalid, authFile)
	}
	for key, a := range cfg.Auths {
		host := authHost(key)
		if host == "" || !validDomain(host) {
			// Not quoted: a malformed key may be a misplaced secret.
			return nil, fmt.Errorf("%w: registry credentials %s: an auths key is not a registry host[:port] (or a URL of one)", ErrInvalid, authFile)
		}
		ac := Auth{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}
		if a.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(a.Auth)
			user, pass, ok := strings.Cut(string(dec), ":")
			if err != nil || !ok {
				return nil, fmt.Errorf("%w: registry credentials %s: auths[%q].auth is not base64 of user:password", ErrInvalid, authFile, key)
			}
			ac.Username, ac.Password = user, pass
		}
		if ac == (Auth{}) {
			return nil, fmt.Errorf("%w: registry credentials %s: auths[%q] holds no credentials", ErrInvalid, authFile, key)
		}
		r.auths[host] = ac
	}
	return r, nil
}

// authHost is the registry host[:port] of a config.json auths key:
// "https://index.docker.io/v1/" is "index.docker.io".
func authHost(key string) string {
	key = strings.TrimPrefix(strings.TrimPrefix(key, "https://"), "http://")
	key, _, _ = strings.Cut(key, "/")
	key = strings.ToLower(key)
	if key == "docker.io" || key == "registry-1.docker.io" {
		key = name.DefaultRegistry
	}
	return key
}

// Registries returns the hosts that have credentials, sorted, for
// reports (never the credentials).
func (r *Registries) Registries() []string {
	var out []string
	if r != nil {
		for h := range r.auths {
			out = append(out, h)
		}
	}
	slices.Sort(out)
	return out
}

// Insecure reports whether host[:port] may be reached over plain HTTP.
func (r *Registries) Insecure(host string) bool {
	return r != nil && slices.Contains(r.insecure, strings.ToLower(host))
}

// Credentials returns the operator's credentials for registry (host[:port]
// as in images/registry's Resolved.Registry), for a registry client or a
// daemon that pulls itself; false when the operator gave none (an
// anonymous pull).
func (r *Registries) Credentials(registry string) (Auth, bool) {
	if r == nil {
		return Auth{}, false
	}
	ac, ok := r.auths[authHost(registry)]
	return ac, ok
}
