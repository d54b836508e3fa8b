package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/redact"
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
	p := Policy{RedactEnv: []string{"PLAIN", "UNSET"}, RedactFiles: []string{file},
		EnvSet: map[string]string{"SET_PLAIN": "visible", "SET_API_KEY": "set-key-0123456789", "SET_URL": "https://u:pw-987654@db/y"}}
	got, err := CallSecrets(p, environ, getenv)
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
		t.Errorf("CallSecrets = %q, want %q", got, want)
	}

	s, err := Redactor(Policy{RedactDetectors: true}, environ, getenv)
	if err != nil || s == nil {
		t.Fatalf("Redactor = %v, %v, want a set", s, err)
	}
	if out := s.String("token ghp_abcdef0123456789 and Z2hwX2FiY2RlZjAxMjM0NTY3ODk="); out != "token [REDACTED:GITHUB_TOKEN] and [REDACTED:GITHUB_TOKEN]" {
		t.Errorf("Redactor with detectors redacts to %q", out)
	}
	if s, err := Redactor(Policy{}, []string{"PATH=/bin"}, nil); s != nil || err != nil {
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
		_, err := CallSecrets(Policy{RedactFiles: []string{path}}, nil, nil)
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "redactFiles[0]") {
			t.Errorf("CallSecrets(file %s) = %v, want an invalid-argument error naming redactFiles[0]", path, err)
		}
		if err != nil && strings.Contains(err.Error(), "the-secret-content") {
			t.Errorf("CallSecrets(file %s) error shows the content: %v", path, err)
		}
	}
}

// TestCaptureRedacts: the tail, the spill file, the live writer and the
// counts see the redacted stream, also when a secret is split across
// writes and when it straddles the point where the spill starts.
func TestCaptureRedacts(t *testing.T) {
	const secret = "s3cr3t-0123456789"
	set := redact.New([]redact.Secret{{Name: "TOKEN", Value: secret}}, redact.Options{})
	spill := filepath.Join(t.TempDir(), "spill", "call.stdout")
	var live strings.Builder
	c := NewCapture(CaptureOptions{TailBytes: 40, SpillPath: spill, Live: &live, Redact: set})
	in := strings.Repeat("x", 30) + secret + " middle " + secret[:4]
	writeChunks(t, c, []byte(in), []int{7})
	if strings.Contains(live.String(), secret[:4]) {
		t.Errorf("live output %q shows the first bytes of a secret whose end is unknown", live.String())
	}
	c.Write([]byte(secret[4:] + " end"))
	st, err := c.Stream()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Repeat("x", 30) + "[REDACTED:TOKEN] middle [REDACTED:TOKEN] end"
	if live.String() != want {
		t.Errorf("live = %q, want %q", live.String(), want)
	}
	if st.Text != want[len(want)-40:] || st.DroppedBytes != int64(len(want)-40) {
		t.Errorf("Stream = %q dropping %d, want %q dropping %d", st.Text, st.DroppedBytes, want[len(want)-40:], len(want)-40)
	}
	data, err := os.ReadFile(spill)
	if err != nil || string(data) != want {
		t.Errorf("spill file = %q, %v, want %q", data, err, want)
	}

	// A stream that ends on a possible secret's first bytes keeps them.
	c = NewCapture(CaptureOptions{Redact: set})
	c.Write([]byte("end " + secret[:6]))
	if st, _ := c.Stream(); st.Text != "end "+secret[:6] {
		t.Errorf("Stream of a stream ending on a prefix = %q, want it whole", st.Text)
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
	p := Policy{Credentials: []Credential{
		{Name: "api", Host: "api.example.com", ValueEnv: "SVC_TOKEN"},
		{Name: "git", Host: "git.example.com", ValueFile: file},
	}}
	s, err := Redactor(p, nil, getenv)
	if err != nil || s == nil {
		t.Fatalf("Redactor = %v, %v, want a set", s, err)
	}
	if out := s.String("a env-secret-0123456789 b file-secret-0123456789 c"); out != "a [REDACTED:credential-api] b [REDACTED:credential-git] c" {
		t.Errorf("the redactor turns the credentials into %q", out)
	}
	p.Credentials[0].ValueEnv = "UNSET_TOKEN"
	if _, err := Redactor(p, nil, getenv); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `credential "api"`) || strings.Contains(err.Error(), "secret-0123456789") {
		t.Errorf("Redactor with an unset credential variable = %v, want an invalid-argument error naming the credential", err)
	}
}
