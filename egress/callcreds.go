package egress

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/dsh-sandbox/dsh-sandbox/internal/safefile"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/secrets"
)

// HostCABundle is the host's CA bundle (Debian's), the start of a
// call's bundle; CABundlePath is where a call with credentials finds
// its bundle (the host's plus the call's CA), bound read-only over the
// same path.
const (
	HostCABundle = "/etc/ssl/certs/ca-certificates.crt"
	CABundlePath = HostCABundle
)

// maxCAFile bounds an operator's upstream CA file and the host bundle.
const maxCAFile = 4 << 20

// CallCredentials resolves a policy's credentials for one call: each
// value read now (secrets.CredentialValue), a placeholder unique to the
// call, the upstream CA file of each read (operator-owned); env holds
// VARIABLE=placeholder for those that name a variable, sorted. Errors
// name the credential and its source, never a value; they wrap
// sandbox.ErrInvalid.
func CallCredentials(cs []sandbox.Credential, getenv func(string) (string, bool)) (creds []Credential, env []string, err error) {
	for i, c := range cs {
		cred, err := readCredential(c, getenv)
		if err != nil {
			return nil, nil, sandbox.Errorf(sandbox.ErrInvalid, "egress: network.credentials[%d]: %w", i, err)
		}
		if cred.Placeholder, err = NewPlaceholder(c.Name); err != nil {
			return nil, nil, sandbox.Errorf(sandbox.ErrInternal, "egress: placeholder: %w", err)
		}
		creds = append(creds, cred)
		if c.Variable != "" {
			env = append(env, c.Variable+"="+cred.Placeholder)
		}
	}
	slices.Sort(env)
	return creds, env, nil
}

// CheckCredentialSource reads c's value and upstream CA as a call would
// (doctor): the error names the credential and its source, never the
// value.
func CheckCredentialSource(c sandbox.Credential, getenv func(string) (string, bool)) error {
	_, err := readCredential(c, getenv)
	return err
}

// readCredential reads c's value and upstream CA now; the placeholder
// is left to the caller.
func readCredential(c sandbox.Credential, getenv func(string) (string, bool)) (Credential, error) {
	v, err := secrets.CredentialValue(c, getenv)
	if err != nil {
		return Credential{}, err
	}
	cred := Credential{Name: c.Name, Host: c.Host, Port: c.Port, Header: c.Header, Format: c.Format, Value: v}
	if c.UpstreamCAFile != "" {
		pem, err := safefile.Read(c.UpstreamCAFile, safefile.Options{MaxBytes: maxCAFile, OperatorOwned: true})
		if err != nil {
			return Credential{}, fmt.Errorf("credential %q: upstreamCA: %v", c.Name, err)
		}
		cred.Roots = x509.NewCertPool()
		if !cred.Roots.AppendCertsFromPEM(pem) {
			return Credential{}, fmt.Errorf("credential %q: upstreamCA: %s holds no PEM certificate", c.Name, c.UpstreamCAFile)
		}
	}
	return cred, nil
}

// CAEnv are the variables that point a call's TLS clients at its CA
// bundle, at path inside the call: SSL_CERT_FILE (OpenSSL, Go),
// CURL_CA_BUNDLE, REQUESTS_CA_BUNDLE (Python), NODE_EXTRA_CA_CERTS and
// GIT_SSL_CAINFO; sorted.
func CAEnv(path string) []string {
	var env []string
	for _, n := range []string{"CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"} {
		env = append(env, n+"="+path)
	}
	return env
}

// WriteCABundle writes a call's CA bundle into dir as name (0644): the
// host's bundle (HostCABundle, when there is one) followed by caPEM,
// the call's CA. It returns the file's path; the caller removes it when
// the call ends.
func WriteCABundle(dir, name string, caPEM []byte) (string, error) {
	host, err := safefile.Read(HostCABundle, safefile.Options{MaxBytes: maxCAFile})
	if err != nil && !os.IsNotExist(err) {
		return "", fmt.Errorf("egress: the host's CA bundle: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("egress: %w", err)
	}
	path := filepath.Join(dir, name)
	data := append(append(append([]byte{}, host...), '\n'), caPEM...)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return "", fmt.Errorf("egress: the call's CA bundle: %w", err)
	}
	return path, os.Chmod(path, 0o644)
}

// Binding is a call's credentials made ready before its network
// starts: each value read, a placeholder made, the call's CA made (its
// key dropped once it signed the hosts' certificates) and the call's CA
// bundle written. StartPolicy makes one; a backend that must configure
// the call's container before its network exists (docker) makes it
// with Bind and hands it to Start in Options.Binding.
type Binding struct {
	creds []Credential
	ca    *callCA
	// Env are each credential's VARIABLE=placeholder and
	// CAEnv(CABundlePath), sorted; apply them with WithEnv.
	Env []string
	// CABundle is the host path of the call's CA bundle, to bind
	// read-only at CABundlePath.
	CABundle string
}

// Bind makes the Binding of a call under p, reading the credentials'
// values through getenv and safefile now and writing the call's CA
// bundle into dir as ID.pem; nil, nil when p has no credentials. The
// caller removes the bundle with Remove when the call ends. On error
// nothing is left.
func Bind(p sandbox.Policy, getenv func(string) (string, bool), dir, id string) (*Binding, error) {
	if len(p.Credentials) == 0 {
		return nil, nil
	}
	creds, env, err := CallCredentials(p.Credentials, getenv)
	if err != nil {
		return nil, err
	}
	if err := checkCredentials(creds); err != nil {
		return nil, err
	}
	b := &Binding{creds: creds}
	if b.ca, err = newCallCA(credentialHosts(creds)); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInternal, "egress: the call's CA: %w", err)
	}
	if b.CABundle, err = WriteCABundle(dir, id+".pem", b.ca.certPEM); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "%w", err)
	}
	b.Env = WithEnv(env, CAEnv(CABundlePath))
	return b, nil
}

// Remove removes the call's CA bundle; a nil Binding has none.
func (b *Binding) Remove() error {
	if b == nil || b.CABundle == "" {
		return nil
	}
	if err := os.Remove(b.CABundle); err != nil && !os.IsNotExist(err) {
		return fmt.Errorf("egress: removing the call's CA bundle: %w", err)
	}
	return nil
}

// Setup is a call's egress network as a backend starts it from the
// policy (StartPolicy): the network, the variables the call gets and,
// with credentials, the call's CA bundle on the host.
type Setup struct {
	Gateway *Gateway
	// Env are the proxy's variables (ProxyEnv) and, with credentials,
	// each credential's VARIABLE=placeholder and CAEnv(CABundlePath);
	// apply them with WithEnv.
	Env []string
	// CABundle is the host path of the call's CA bundle, to bind
	// read-only at CABundlePath; empty without credentials.
	CABundle string
	// Files is the directory of the name-service files (WriteFiles) the
	// call binds; set by StartCall, empty from StartPolicy.
	Files   string
	binding *Binding
}

// StartCall starts the egress network of call, a call of network
// allowlist under p, for a backend whose runtime joins the network
// namespace by its path (oci, containerd): it writes the name-service
// files into stateDir/egress (WriteFiles), starts the network there
// (StartPolicy, the call's files below stateDir/egress/calls) and points
// call.Env at the proxy (Setup.Env). policy.WithEgress joins a spec to
// what it returns. Errors are StartPolicy's, or, when the files cannot be
// written, one wrapping sandbox.ErrUnavailable that starts with
// "<backend>: call <id>: ". On error nothing is left.
func StartCall(backend string, p sandbox.Policy, o Options, getenv func(string) (string, bool), stateDir string, call *sandbox.Call) (*Setup, error) {
	files := filepath.Join(stateDir, "egress")
	if err := WriteFiles(files); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "%s: call %s: %w", backend, call.ID, err)
	}
	st, err := StartPolicy(p, o, getenv, filepath.Join(files, "calls"), call.ID)
	if err != nil {
		return nil, err
	}
	st.Files = files
	call.Env = WithEnv(call.Env, st.Env)
	return st, nil
}

// StartPolicy starts the egress network of a call under p (Bind, then
// Start with p's rules and the binding). On error nothing is left.
func StartPolicy(p sandbox.Policy, o Options, getenv func(string) (string, bool), dir, id string) (*Setup, error) {
	b, err := Bind(p, getenv, dir, id)
	if err != nil {
		return nil, err
	}
	o.Allow, o.Deny, o.Binding = p.NetworkAllow, p.NetworkDeny, b
	c, err := Start(o)
	if err != nil {
		_ = b.Remove()
		return nil, err
	}
	s := &Setup{Gateway: c, Env: ProxyEnv(), binding: b}
	if b != nil {
		s.CABundle = b.CABundle
		s.Env = WithEnv(s.Env, b.Env)
	}
	return s, nil
}

// Close ends the call's network (Gateway.Close) and removes its CA
// bundle; it returns the record.
func (s *Setup) Close() []sandbox.Connection {
	recs := s.Gateway.Close()
	if err := s.binding.Remove(); err != nil {
		s.Gateway.p.log.Debug("egress: removing the call's CA bundle", "error", err)
	}
	return recs
}
