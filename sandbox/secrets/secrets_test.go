package secrets

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures/calls"
	"github.com/dsh-sandbox/dsh-sandbox/redact"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestCallSecretsCase(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "creds")
	if err := os.WriteFile(file, []byte("  user=alice\npass=hunter2-long\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	environ := []string{
		"PATH=/usr/bin", "LANG=C.UTF-8", "GITHUB_TOKEN=ghp_abcdef0123456789",
		"DATABASE_URL=postgres://u:pw-123456@db/x", "PLAIN=plain-value-42", "BROKEN",
		"LD_PRELOAD=/lib/evil.so", "DSH_SESSION_ID=s-1",
	}
	getenv := func(name string) (string, bool) {
		for _, e := range environ {
			if k, v, ok := strings.Cut(e, "="); ok && k == name {
				return v, true
			}
		}
		return "", false
	}
	p := sandbox.Policy{RedactEnv: []string{"PLAIN", "UNSET"}, RedactFiles: []string{file},
		EnvSet: map[string]string{"SET_PLAIN": "visible", "SET_API_KEY": "set-key-0123456789", "SET_URL": "https://u:pw-987654@db/y"}}
	got, err := Of(p, environ, getenv)
	if err != nil {
		t.Fatal(err)
	}
	want := []redact.Secret{
		{Name: "GITHUB_TOKEN", Value: "ghp_abcdef0123456789"},
		{Name: "DATABASE_URL", Value: "postgres://u:pw-123456@db/x"},
		{Name: "SET_API_KEY", Value: "set-key-0123456789"},
		{Name: "SET_URL", Value: "https://u:pw-987654@db/y"},
		{Name: "PLAIN", Value: "plain-value-42"},
		{Name: "creds", Value: "user=alice\npass=hunter2-long"},
		{Name: "creds", Value: "user=alice"},
		{Name: "creds", Value: "pass=hunter2-long"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Of = %q, want %q", got, want)
	}

	s, err := Redactor(sandbox.Policy{RedactDetectors: true}, environ, getenv, calls.Detector{})
	if err != nil || s == nil {
		t.Fatalf("Redactor = %v, %v, want a set", s, err)
	}
	if out := s.String("token ghp_abcdef0123456789 and Z2hwX2FiY2RlZjAxMjM0NTY3ODk="); out != "token [REDACTED:GITHUB_TOKEN] and [REDACTED:GITHUB_TOKEN]" {
		t.Errorf("Redactor with detectors redacts to %q", out)
	}
	if s, err := Redactor(sandbox.Policy{}, []string{"PATH=/bin"}, nil, nil); s != nil || err != nil {
		t.Errorf("Redactor with no secrets = %v, %v, want nil, nil", s, err)
	}
}

// TestCallSecretsUnsafeFile: a redact file that cannot be read as data
// fails the call, naming the file and not its content.
func TestCallSecretsUnsafeFile(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real")
	if err := os.WriteFile(real, []byte("the-secret-content"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	writable := filepath.Join(dir, "writable")
	if err := os.WriteFile(writable, []byte("the-secret-content"), 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(writable, 0o666); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "missing"), link, writable, dir} {
		_, err := Of(sandbox.Policy{RedactFiles: []string{path}}, nil, nil)
		if err == nil || !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "redactFiles[0]") {
			t.Errorf("Of(file %s) = %v, want an invalid-argument error naming redactFiles[0]", path, err)
		}
		if err != nil && strings.Contains(err.Error(), "the-secret-content") {
			t.Errorf("Of(file %s) error shows the content: %v", path, err)
		}
	}
}

// TestCallSecretsCredentials: the redactor knows every credential's
// value, from the service's variable and from an operator-owned file,
// as credential-NAME, so that output, spill files, job output, hook
// payloads and records that pass through it never hold one; a source
// that cannot be read fails the call, naming the credential, never a
// value.
func TestCallSecretsCredentials(t *testing.T) {
	file := filepath.Join(t.TempDir(), "gh.token")
	if err := os.WriteFile(file, []byte("  file-secret-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	getenv := func(name string) (string, bool) {
		if name == "SVC_TOKEN" {
			return "env-secret-0123456789", true
		}
		return "", false
	}
	p := sandbox.Policy{Credentials: []sandbox.Credential{
		{Name: "api", Host: "api.example.com", ValueEnv: "SVC_TOKEN"},
		{Name: "git", Host: "git.example.com", ValueFile: file},
	}}
	s, err := Redactor(p, nil, getenv, nil)
	if err != nil || s == nil {
		t.Fatalf("Redactor = %v, %v, want a set", s, err)
	}
	if out := s.String("a env-secret-0123456789 b file-secret-0123456789 c"); out != "a [REDACTED:credential-api] b [REDACTED:credential-git] c" {
		t.Errorf("the redactor turns the credentials into %q", out)
	}
	p.Credentials[0].ValueEnv = "UNSET_TOKEN"
	if _, err := Redactor(p, nil, getenv, nil); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), `credential "api"`) || strings.Contains(err.Error(), "secret-0123456789") {
		t.Errorf("Redactor with an unset credential variable = %v, want an invalid-argument error naming the credential", err)
	}
}

// TestRedactorDetectors: a policy with redact.detectors and no pattern
// detector is refused (ErrUnavailable, naming redact.detectors), before
// any redact file is read; with a detector its findings are redacted
// with the known values; without redact.detectors no detector is needed.
func TestRedactorDetectors(t *testing.T) {
	p := sandbox.Policy{RedactDetectors: true, RedactFiles: []string{filepath.Join(t.TempDir(), "missing")}}
	s, err := Redactor(p, nil, nil, nil)
	if s != nil || !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "redact.detectors") ||
		!strings.Contains(err.Error(), "no pattern detector") || strings.Contains(err.Error(), "redactFiles") {
		t.Errorf("Redactor without a detector = %v, %v, want an unavailable error naming redact.detectors", s, err)
	}

	environ := []string{"API_TOKEN=known-secret-0123456789"}
	p.RedactFiles = nil
	s, err = Redactor(p, environ, nil, calls.Detector{})
	if err != nil || s == nil {
		t.Fatalf("Redactor with a detector = %v, %v, want a set", s, err)
	}
	if out := s.String("a known-secret-0123456789 b tok_0123456789 c"); out != "a [REDACTED:API_TOKEN] b [REDACTED:tok] c" {
		t.Errorf("Redactor with a detector redacts to %q", out)
	}

	p.RedactDetectors = false
	if s, err := Redactor(p, environ, nil, nil); err != nil || s == nil || s.String("tok_0123456789") != "tok_0123456789" {
		t.Errorf("Redactor without redact.detectors and without a detector = %v, %v, want a set of the known values", s, err)
	}
}

// TestRedactOutcomeWithoutDetector: the outcome of a call under a policy
// with redact.detectors, redacted without a detector, keeps its class but
// not its text (which may hold what only the detector would find), and
// says why; the egress records are left out.
func TestRedactOutcomeWithoutDetector(t *testing.T) {
	p := sandbox.Policy{RedactDetectors: true}
	in := sandbox.Errorf(sandbox.ErrNotFound, "failed near tok_0123456789")
	res, err := RedactOutcome(p, nil, &sandbox.Result{Egress: []sandbox.Connection{{Host: "tok_0123456789.example"}}}, in)
	if !errors.Is(err, sandbox.ErrNotFound) || strings.Contains(err.Error(), "tok_") || !strings.Contains(err.Error(), "redact.detectors") {
		t.Errorf("RedactOutcome without a detector: error %v, want class not found, the text left out, naming redact.detectors", err)
	}
	if res == nil || res.Egress != nil {
		t.Errorf("RedactOutcome without a detector: result %+v, want one with the egress left out", res)
	}
	if _, err := RedactOutcome(p, calls.Detector{}, nil, in); err == nil || err.Error() != "failed near [REDACTED:tok]" {
		t.Errorf("RedactOutcome with a detector = %v, want the token redacted", err)
	}
}
