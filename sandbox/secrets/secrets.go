package secrets

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dsh-sandbox/dsh-sandbox/internal/safefile"
	"github.com/dsh-sandbox/dsh-sandbox/redact"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/childenv"
)

// MaxFileBytes bounds a file of Policy.RedactFiles.
const MaxFileBytes = 64 << 10

// Of returns the secrets a call's output must not show (issue
// 15), names with values, in this order:
//
//   - every variable of environ (the service's environment as
//     KEY=VALUE) that the secret filter of DESIGN §3.6 keeps from a
//     child: its name looks like a secret (childenv.SecretName) or its value does
//     (childenv.SecretValue). Names that env.allowSecrets passes are included: the
//     policy lets the call use the value, not show it;
//   - every variable of p.EnvSet whose name or value looks like a secret
//     by the same rule, in name order;
//   - the variables of p.RedactEnv, read with getenv (nil: none); a name
//     that is not set adds nothing;
//   - for each file of p.RedactFiles, read with safefile (no link in any
//     component, a regular file of at most MaxFileBytes, owned by
//     root or this process's user and writable by nobody else), its
//     content without surrounding white space and each of its lines
//     likewise, named by the file's base name.
//
// Values shorter than redact.MinLen are kept here; redact.New skips
// them. An unreadable file is an error wrapping ErrInvalid that names
// the file (never its content): a call must not run when a secret it
// should hide is unknown. Of is safe for concurrent use.
func Of(p sandbox.Policy, environ []string, getenv func(string) (string, bool)) ([]redact.Secret, error) {
	var out []redact.Secret
	for _, e := range environ {
		name, v, ok := strings.Cut(e, "=")
		if ok && name != "" && (childenv.SecretName(name) || childenv.SecretValue(v)) {
			out = append(out, redact.Secret{Name: name, Value: v})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(p.EnvSet)) {
		if v := p.EnvSet[name]; childenv.SecretName(name) || childenv.SecretValue(v) {
			out = append(out, redact.Secret{Name: name, Value: v})
		}
	}
	if getenv != nil {
		for _, name := range p.RedactEnv {
			if v, ok := getenv(name); ok {
				out = append(out, redact.Secret{Name: name, Value: v})
			}
		}
	}
	for i, path := range p.RedactFiles {
		data, err := safefile.Read(path, safefile.Options{MaxBytes: MaxFileBytes, OperatorOwned: true})
		if err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "sandbox: policy.redactFiles[%d]: %v", i, err)
		}
		name := filepath.Base(path)
		text := string(data)
		out = append(out, redact.Secret{Name: name, Value: strings.TrimSpace(text)})
		for line := range strings.Lines(text) {
			if line = strings.TrimSpace(line); line != "" {
				out = append(out, redact.Secret{Name: name, Value: line})
			}
		}
	}
	for i, c := range p.Credentials {
		v, err := CredentialValue(c, getenv)
		if err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "sandbox: policy.credentials[%d]: %v", i, err)
		}
		out = append(out, redact.Secret{Name: "credential-" + c.Name, Value: v})
	}
	return slices.Clip(out), nil
}

// CredentialValue reads the secret of c at call time: the service's
// variable c.ValueEnv (through getenv), or the operator-owned file
// c.ValueFile (safefile: no links, a regular file owned by root or this
// process, not writable by group or others, at most MaxFileBytes),
// surrounding white space trimmed. An unset variable, an unreadable
// file or an empty value is an error naming the source, never the value.
func CredentialValue(c sandbox.Credential, getenv func(string) (string, bool)) (string, error) {
	var v string
	switch {
	case c.ValueEnv != "":
		ok := false
		if getenv != nil {
			v, ok = getenv(c.ValueEnv)
		}
		if !ok {
			return "", fmt.Errorf("credential %q: the service's variable %s is not set", c.Name, c.ValueEnv)
		}
	case c.ValueFile != "":
		data, err := safefile.Read(c.ValueFile, safefile.Options{MaxBytes: MaxFileBytes, OperatorOwned: true})
		if err != nil {
			return "", fmt.Errorf("credential %q: %v", c.Name, err)
		}
		v = string(data)
	default:
		return "", fmt.Errorf("credential %q has no value source", c.Name)
	}
	if v = strings.TrimSpace(v); v == "" {
		return "", fmt.Errorf("credential %q: the value from its source is empty", c.Name)
	}
	return v, nil
}

// Redactor compiles the Of of p, with their base64 forms and the pattern
// detector d (the program's, redact.Options.Detector; nil: none) when
// p.RedactDetectors is set; nil when there is nothing to redact. Errors
// are those of CheckDetector, then those of Of.
func Redactor(p sandbox.Policy, environ []string, getenv func(string) (string, bool), d redact.Detector) (*redact.Set, error) {
	if err := CheckDetector(p, d); err != nil {
		return nil, err
	}
	secrets, err := Of(p, environ, getenv)
	if err != nil {
		return nil, err
	}
	o := redact.Options{Base64: p.RedactDetectors}
	if p.RedactDetectors {
		o.Detector = d
	}
	s := redact.New(secrets, o)
	if s.Len() == 0 {
		return nil, nil
	}
	return s, nil
}

// CheckDetector refuses a policy that sets RedactDetectors when the
// program has no pattern detector (d is nil): an error wrapping
// ErrUnavailable that names redact.detectors. Redacting only the known
// values then would weaken the policy without a word, so the call must
// not run. The dsh-sandbox command always has one (gitleaks's); a
// program using the library gives one to driver.Service.Detector,
// api.Options.Detector and hooks.RunOptions.Detector.
func CheckDetector(p sandbox.Policy, d redact.Detector) error {
	if p.RedactDetectors && d == nil {
		return sandbox.Errorf(sandbox.ErrUnavailable, "sandbox: policy redact.detectors is set, but this program has no pattern detector "+
			"(the dsh-sandbox command passes gitleaks's; a program using the library sets driver.Service.Detector, "+
			"api.Options.Detector or hooks.RunOptions.Detector): refusing the call rather than redacting only the known secrets")
	}
	return nil
}

// RedactOutcome replaces the call's secrets (Redactor with the pattern
// detector d: the service's secret-looking env, the policy's EnvSet and
// redact section, what d finds)
// in the free text of a call's outcome, the error and the egress hosts
// and reasons, before a client, the CLI's output or the audit log sees it (the output was
// redacted as it was captured). res is not changed: the result returned
// is a copy. The error keeps its class and field. When the secrets cannot
// be known, or p sets RedactDetectors and d is nil (CheckDetector), that
// text is left out.
func RedactOutcome(p sandbox.Policy, d redact.Detector, res *sandbox.Result, err error) (*sandbox.Result, error) {
	if err == nil && (res == nil || len(res.Egress) == 0) {
		return res, err
	}
	s, rerr := Redactor(p, os.Environ(), os.LookupEnv, d)
	if res != nil && len(res.Egress) > 0 {
		out := *res
		out.Egress = nil
		if rerr == nil {
			out.Egress = slices.Clone(res.Egress)
			for i := range out.Egress {
				out.Egress[i].Host = s.String(out.Egress[i].Host)
				out.Egress[i].Reason = s.String(out.Egress[i].Reason)
			}
		}
		res = &out
	}
	if err != nil {
		msg := s.String(err.Error())
		if rerr != nil {
			msg = "output redaction unavailable; error text left out: " + rerr.Error()
		}
		if msg != err.Error() {
			err = &redactedError{err: err, msg: msg}
		}
	}
	return res, err
}

// redactedError is an error whose text had secrets replaced; it wraps the
// original for its class and field (the API's error body) only.
type redactedError struct {
	err error
	msg string
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }
