package images

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
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
	auths map[string]authn.AuthConfig
	// insecure lists the host[:port] reached over plain HTTP.
	insecure []string
	// Transport is the HTTP transport under the scheme check; nil means
	// a clone of http.DefaultTransport with bounded dial and handshake
	// times. Tests set it.
	Transport http.RoundTripper
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
	r := &Registries{auths: map[string]authn.AuthConfig{}}
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
		ac := authn.AuthConfig{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}
		if a.Auth != "" {
			dec, err := base64.StdEncoding.DecodeString(a.Auth)
			user, pass, ok := strings.Cut(string(dec), ":")
			if err != nil || !ok {
				return nil, fmt.Errorf("%w: registry credentials %s: auths[%q].auth is not base64 of user:password", ErrInvalid, authFile, key)
			}
			ac.Username, ac.Password = user, pass
		}
		if ac == (authn.AuthConfig{}) {
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

// Resolve implements authn.Keychain: the credentials of the resource's
// registry, else anonymous.
func (r *Registries) Resolve(res authn.Resource) (authn.Authenticator, error) {
	if r != nil {
		if ac, ok := r.auths[strings.ToLower(res.RegistryStr())]; ok {
			return authn.FromConfig(ac), nil
		}
	}
	return authn.Anonymous, nil
}

// reference parses a canonical reference for the registry, marking it
// insecure only when its registry is listed.
func (r *Registries) reference(ref string) (name.Reference, error) {
	var opts []name.Option
	if first, _, ok := strings.Cut(ref, "/"); ok && r.Insecure(first) {
		opts = append(opts, name.Insecure)
	}
	nr, err := name.ParseReference(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: reference %q: %v", ErrInvalid, ref, err)
	}
	return nr, nil
}

// transport is the HTTP transport of pulls: every request to a registry
// not listed as insecure goes over HTTPS, whatever the registry client
// chose (it prefers plain HTTP for loopback and private addresses).
func (r *Registries) transport() http.RoundTripper {
	base := http.RoundTripper(nil)
	if r != nil {
		base = r.Transport
	}
	if base == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		t.TLSHandshakeTimeout = 30 * time.Second
		t.ResponseHeaderTimeout = 5 * time.Minute
		t.Proxy = nil // the operator's registries are reached directly
		base = t
	}
	return &schemeCheck{r: r, next: base}
}

// schemeCheck upgrades plain-HTTP requests to hosts not listed as
// insecure to HTTPS.
type schemeCheck struct {
	r    *Registries
	next http.RoundTripper
}

func (s *schemeCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !s.r.Insecure(req.URL.Host) {
		req = req.Clone(req.Context())
		req.URL.Scheme = "https"
	}
	return s.next.RoundTrip(req)
}
