package registry

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/dsh-sandbox/dsh-sandbox/images"
)

// keychain is the authn.Keychain of the operator's registries: the
// credentials of the resource's registry, else anonymous.
type keychain struct{ r *images.Registries }

func (k keychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	if a, ok := k.r.Credentials(res.RegistryStr()); ok {
		return authn.FromConfig(authn.AuthConfig{Username: a.Username, Password: a.Password, IdentityToken: a.IdentityToken, RegistryToken: a.RegistryToken}), nil
	}
	return authn.Anonymous, nil
}

// remoteOptions are the registry client's options of a pull from r.
func remoteOptions(ctx context.Context, r *images.Registries) []remote.Option {
	return []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(keychain{r}),
		remote.WithTransport(pullTransport(r)),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}),
		remote.WithUserAgent("dsh-sandbox"),
	}
}

// reference parses a canonical reference for the registry, marking it
// insecure only when r lists its registry.
func reference(r *images.Registries, ref string) (name.Reference, error) {
	var opts []name.Option
	if first, _, ok := strings.Cut(ref, "/"); ok && r.Insecure(first) {
		opts = append(opts, name.Insecure)
	}
	nr, err := name.ParseReference(ref, opts...)
	if err != nil {
		return nil, fmt.Errorf("%w: reference %q: %v", images.ErrInvalid, ref, err)
	}
	return nr, nil
}

// pullTransport is the HTTP transport of pulls: every request to a registry
// r does not list as insecure goes over HTTPS, whatever the registry
// client chose (it prefers plain HTTP for loopback and private
// addresses).
func pullTransport(r *images.Registries) http.RoundTripper {
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
	r    *images.Registries
	next http.RoundTripper
}

func (s *schemeCheck) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Scheme == "http" && !s.r.Insecure(req.URL.Host) {
		req = req.Clone(req.Context())
		req.URL.Scheme = "https"
	}
	return s.next.RoundTrip(req)
}
