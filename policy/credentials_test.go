package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

const credentialsYAML = `
name: gh
network:
  mode: allowlist
  allow: [api.github.com, github.com]
  credentials:
    - name: github
      host: api.github.com
      variable: GITHUB_TOKEN
      value: {env: DSH_SANDBOX_GH_TOKEN}
    - name: git
      host: github.com
      port: 443
      header: Authorization
      format: "token {}"
      value: {file: /etc/dsh-sandbox/gh.token}
      upstreamCA: /etc/dsh-sandbox/upstream-ca.pem
`

func TestParseCredentials(t *testing.T) {
	p, err := Parse([]byte(credentialsYAML))
	if err != nil {
		t.Fatal(err)
	}
	want := []sandbox.Credential{
		{Name: "github", Host: "api.github.com", Port: 443, Header: "Authorization", Format: "Bearer {}", Variable: "GITHUB_TOKEN", ValueEnv: "DSH_SANDBOX_GH_TOKEN"},
		{Name: "git", Host: "github.com", Port: 443, Header: "Authorization", Format: "token {}", ValueFile: "/etc/dsh-sandbox/gh.token", UpstreamCAFile: "/etc/dsh-sandbox/upstream-ca.pem"},
	}
	if len(p.Credentials) != 2 || p.Credentials[0] != want[0] || p.Credentials[1] != want[1] {
		t.Errorf("Parse(credentials) = %+v, want %+v", p.Credentials, want)
	}
	b, err := Format(p)
	if err != nil {
		t.Fatal(err)
	}
	q, err := Parse(b)
	if err != nil || q.Digest != p.Digest {
		t.Errorf("Parse(Format(p)) = digest %s, %v; want %s", q.Digest, err, p.Digest)
	}
	got := Explain(p)
	for _, w := range []string{`credential "github": the proxy puts it in header Authorization ("Bearer {}") of HTTPS requests to api.github.com:443, read at call time from the service's variable DSH_SANDBOX_GH_TOKEN; the call's GITHUB_TOKEN holds a placeholder`,
		`credential "git": `, "the operator-owned file /etc/dsh-sandbox/gh.token", "verified against the operator's CA file /etc/dsh-sandbox/upstream-ca.pem"} {
		if !strings.Contains(got, w) {
			t.Errorf("Explain lacks %q:\n%s", w, got)
		}
	}
}

func TestParseCredentialsRefused(t *testing.T) {
	base := "network:\n  mode: allowlist\n  allow: [api.github.com]\n  credentials:\n    - "
	for _, tc := range []struct{ entry, want string }{
		{"{name: gh, host: api.github.com}", "credentials[0].value: want exactly one of env"},
		{"{name: gh, host: api.github.com, value: {env: A, file: /x}}", "credentials[0].value: want exactly one"},
		{"{name: gh, host: other.example.com, value: {env: A}}", "credentials[0].host: other.example.com:443 is not reached by network.allow"},
		{"{name: gh, host: \"10.0.0.1\", value: {env: A}}", "credentials[0].host: \"10.0.0.1\": want a lower-case host name"},
		{"{name: gh, host: \"api.github.com:443\", value: {env: A}}", "credentials[0].host"},
		{"{name: gh, host: \"*.github.com\", value: {env: A}}", "credentials[0].host"},
		{"{name: GH, host: api.github.com, value: {env: A}}", "credentials[0].name"},
		{"{name: gh, host: api.github.com, header: \"Bad Header\", value: {env: A}}", "credentials[0].header"},
		{"{name: gh, host: api.github.com, format: \"Bearer\", value: {env: A}}", "credentials[0].format"},
		{"{name: gh, host: api.github.com, variable: HTTPS_PROXY, value: {env: A}}", "credentials[0].variable: \"HTTPS_PROXY\" is reserved"},
		{"{name: gh, host: api.github.com, value: {file: relative/path}}", "credentials[0].value.file"},
		{"{name: gh, host: api.github.com, port: 0, value: {env: A}}", "credentials[0].port"},
		{"{name: gh, host: api.github.com, value: {env: A}, token: x}", "credentials[0].token: unknown field"},
	} {
		doc := base + tc.entry
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("Parse(%s) = %v, want an invalid-argument error containing %q", tc.entry, err, tc.want)
		}
	}
	for _, doc := range []string{
		"network:\n  mode: loopback\n  credentials: [{name: gh, host: api.github.com, value: {env: A}}]",
		"backend: local\nnetwork:\n  mode: allowlist\n  allow: [api.github.com]\n  credentials: [{name: gh, host: api.github.com, value: {env: A}}]",
	} {
		if _, err := Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), "network.credentials") {
			t.Errorf("Parse(%q) = %v, want a refusal naming network.credentials", doc, err)
		}
	}
	// The legitimate variant of the cases above.
	if _, err := Parse([]byte(base + "{name: gh, host: api.github.com, value: {env: A}}")); err != nil {
		t.Errorf("Parse(a valid credential) = %v", err)
	}
}

// TestCredentialsBackends: a policy with a credential is accepted on
// the backends that inject them (oci, docker, containerd) and refused
// on every other, naming network.credentials, the backend and why.
func TestCredentialsBackends(t *testing.T) {
	for _, b := range defaultBackends {
		doc := "backend: " + string(b) + "\nnetwork:\n  mode: allowlist\n  allow: [api.github.com]\n  credentials: [{name: gh, host: api.github.com, value: {env: A}}]"
		p, err := Parse([]byte(doc))
		if b == sandbox.BackendOCI || b == sandbox.BackendDocker || b == sandbox.BackendContainerd {
			if err != nil || len(p.Credentials) != 1 {
				t.Errorf("backend %s: Parse = %v, want the credential accepted", b, err)
			}
			continue
		}
		want := "network.credentials: backend " + string(b) + " cannot inject credentials: it serves no egress proxy for its calls; use backend oci or docker or containerd"
		if err == nil || !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("backend %s: Parse = %v, want an invalid-argument error containing %q", b, err, want)
		}
	}
}
