package childenv

import (
	"slices"
	"strconv"
	"strings"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// DSHPrefix is the namespace of the trusted harness facts (DESIGN §3.5).
// Only Input.Snapshot may set names in it.
const DSHPrefix = "DSH_"

// secretWords are the substrings that make an inherited name look like a
// secret (DESIGN §3.6 and issue 10), compared case-insensitively:
// API_KEY, SESSION_KEY, DB_PASSWORD, LDAP_PASSWD, AUTH_TOKEN, CLIENT_SECRET,
// AWS_CREDENTIALS, SSH_PRIVATE_KEY_FILE, AZURE_STORAGE_CONNECTION_STRING.
var secretWords = [...]string{"KEY", "PASSWORD", "PASSWD", "SECRET", "TOKEN", "CREDENTIAL", "PRIVATE", "CONNECTION_STRING"}

// secretParts are the "_"-separated words that make a name look like a
// secret, compared case-insensitively as whole words so that GIT_AUTHOR_NAME,
// PATH or PWD itself are not caught: GH_PAT, NPM_AUTH, BASIC_AUTH_USER,
// SENTRY_DSN, DB_PWD, MYSQL_PASS, GIT_CREDS, SESSION_COOKIE,
// HTTP_AUTHORIZATION. CERT is deliberately absent: SSL_CERT_FILE and
// NODE_EXTRA_CA_CERTS name public certificates that TLS clients need
// (a private key matches KEY or PRIVATE).
var secretParts = [...]string{"PAT", "AUTH", "AUTHORIZATION", "DSN", "PWD", "PASS", "CREDS", "COOKIE"}

// secretValueWords are the case-insensitive value fragments of connection
// strings that carry a secret ("host=db password=…",
// "…;AccountKey=…;"). A URL with a password is found by urlCredentials.
var secretValueWords = [...]string{"password=", "passwd=", "pwd=", "accountkey=", "sharedaccesskey=", "secret=", "token="}

// terminalEnv is layer 3 of DESIGN §3.6: settings that keep tools from
// paging or colouring output the model reads.
var terminalEnv = [...]string{"NO_COLOR=1", "TERM=dumb", "PAGER=cat", "GIT_PAGER=cat"}

// Input holds the layers of a child's environment (DESIGN §3.6). The
// zero value is valid and yields just the terminal settings. Build
// neither modifies nor keeps any of the slices.
type Input struct {
	// Base is layer 1, the image's own env as KEY=VALUE (PATH, HOME, …).
	Base []string
	// Inherit is layer 2: names whose values are read with Getenv, after
	// dropping DSH_* names, LD_* names, names that look like secrets
	// (Inheritable) and values that look like secrets (SecretValue: a
	// URL with a password, a connection string with a password or key).
	// A name missing from Getenv is left out.
	Inherit []string
	// AllowSecrets are names of Inherit that the policy passes even
	// though their name or value looks like a secret (policy
	// env.allowSecrets). DSH_* and LD_* names are dropped all the same;
	// a name that is not in Inherit does nothing. Nil allows none.
	AllowSecrets []string
	// Getenv reads the service's environment for Inherit; nil means an
	// empty environment. os.LookupEnv fits.
	Getenv func(string) (string, bool)
	// Ordinary is layer 4, KEY=VALUE env from trusted callers (policy
	// env.set, hooks), applied after the terminal settings (layer 3).
	Ordinary []string
	// Snapshot is layer 5, the trusted DSH_* snapshot as KEY=VALUE,
	// applied last. Every name must begin with "DSH_".
	Snapshot []string
}

// Build returns the environment of a child as sorted KEY=VALUE entries,
// one per name, built from nothing but the layers of in, in order, a
// later layer winning over an earlier one. Names are case-sensitive;
// names beginning with DSH_ in any case are dropped from layers 1–4, so
// every DSH_* entry of the result comes from in.Snapshot.
//
// An entry without "=", with an empty name, or with a NUL byte in its
// name or value; an Inherit name that is empty or holds "=" or NUL; or a
// Snapshot name outside DSH_ is an error wrapping ErrInvalid that names
// the layer and the entry's name, never its value. Build is pure and
// safe for concurrent use.
func Build(in Input) ([]string, error) {
	env := make(map[string]string, len(in.Base)+len(in.Inherit)+len(terminalEnv)+len(in.Ordinary)+len(in.Snapshot))

	if err := addEntries(env, "image env", in.Base, false); err != nil {
		return nil, err
	}
	for _, name := range in.Inherit {
		if err := checkName("env.inherit", name); err != nil {
			return nil, err
		}
		allowed := slices.Contains(in.AllowSecrets, name)
		if in.Getenv == nil || IsDSHName(name) || strings.HasPrefix(strings.ToUpper(name), "LD_") ||
			!allowed && !Inheritable(name) {
			continue
		}
		v, ok := in.Getenv(name)
		if !ok || !allowed && SecretValue(v) {
			continue
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "sandbox: env.inherit: value of %q contains a NUL byte", name)
		}
		env[name] = v
	}
	for _, e := range terminalEnv {
		name, v, _ := strings.Cut(e, "=")
		env[name] = v
	}
	if err := addEntries(env, "env", in.Ordinary, false); err != nil {
		return nil, err
	}
	if err := addEntries(env, "dshEnv", in.Snapshot, true); err != nil {
		return nil, err
	}

	names := make([]string, 0, len(env))
	for name := range env {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]string, len(names))
	for i, name := range names {
		out[i] = name + "=" + env[name]
	}
	return out, nil
}

// Inheritable reports whether layer 2 may copy the service's variable
// name into a child without a policy's explicit env.allowSecrets: false
// for DSH_* names (any case), LD_* names (any case), names containing
// one of secretWords (KEY, PASSWORD, PASSWD, SECRET, TOKEN, CREDENTIAL,
// PRIVATE, CONNECTION_STRING) and names with a "_"-separated word of
// secretParts (PAT, AUTH, AUTHORIZATION, DSN, PWD, PASS, CREDS, COOKIE),
// all in any case. It does not check that name is well-formed.
func Inheritable(name string) bool {
	up := strings.ToUpper(name)
	return !strings.HasPrefix(up, DSHPrefix) && !strings.HasPrefix(up, "LD_") && !SecretName(name)
}

// SecretName reports whether name looks like it holds a secret: it
// contains one of secretWords or has a "_"-separated word of secretParts,
// in any case (Inheritable lists them).
func SecretName(name string) bool {
	up := strings.ToUpper(name)
	for _, w := range secretWords {
		if strings.Contains(up, w) {
			return true
		}
	}
	words := strings.Split(up, "_")
	for _, w := range secretParts {
		// A bare PWD (or PASS, …) is a single word and not a secret:
		// PWD is the working directory.
		if len(words) > 1 && slices.Contains(words, w) {
			return true
		}
	}
	return false
}

// SecretValue reports whether an environment value looks like it holds a
// credential: a URL with a password in its user info
// ("postgres://u:p@h/db", "redis://:p@h"), anywhere in the value, or a
// connection-string fragment such as "password=" or "AccountKey=" (any
// case). Layer 2 drops such values unless the policy allows the name.
func SecretValue(v string) bool {
	if urlCredentials(v) {
		return true
	}
	low := strings.ToLower(v)
	for _, w := range secretValueWords {
		if strings.Contains(low, w) {
			return true
		}
	}
	return false
}

// urlCredentials reports whether v holds "scheme://user:password@" at any
// "://": up to the next white space there is an "@" with a ":" before it.
// The user info is not cut at "/" because passwords are often written
// unescaped ("postgres://u:p/w@h"); a URL with a port and an "@" in its
// path is dropped too, which errs on the safe side (the policy can allow
// its name).
func urlCredentials(v string) bool {
	for rest := v; ; {
		i := strings.Index(rest, "://")
		if i < 0 {
			return false
		}
		rest = rest[i+3:]
		end := strings.IndexAny(rest, " \t\n")
		if end < 0 {
			end = len(rest)
		}
		if at := strings.IndexByte(rest[:end], '@'); at >= 0 && strings.IndexByte(rest[:at], ':') >= 0 {
			return true
		}
	}
}

// IsDSHName reports whether name lies in the DSH_ namespace in any case;
// such names reach a child only through the snapshot.
func IsDSHName(name string) bool {
	return len(name) >= len(DSHPrefix) && strings.EqualFold(name[:len(DSHPrefix)], DSHPrefix)
}

// addEntries validates the KEY=VALUE entries of one layer and sets them
// in env. A snapshot layer requires exact DSH_ names; any other layer
// drops DSH_* names.
func addEntries(env map[string]string, layer string, entries []string, snapshot bool) error {
	for i, e := range entries {
		name, v, ok := strings.Cut(e, "=")
		if !ok {
			// Without "=" the whole entry may be a value; never echo it.
			return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s[%d]: entry has no \"=\"", layer, i)
		}
		if err := checkName(layer+"["+strconv.Itoa(i)+"]", name); err != nil {
			return err
		}
		if strings.IndexByte(v, 0) >= 0 {
			return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s[%d]: value of %q contains a NUL byte", layer, i, name)
		}
		switch {
		case snapshot && !strings.HasPrefix(name, DSHPrefix):
			return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s[%d]: name %q is not in the %s namespace", layer, i, name, DSHPrefix)
		case !snapshot && IsDSHName(name):
			continue
		}
		env[name] = v
	}
	return nil
}

// CheckEntries validates the KEY=VALUE entries of one layer as Build
// does, naming the layer: a snapshot layer requires exact DSH_ names; any
// other layer may hold DSH_* names, which Build drops. Errors wrap
// ErrInvalid.
func CheckEntries(layer string, entries []string, snapshot bool) error {
	return addEntries(map[string]string{}, layer, entries, snapshot)
}

// CheckName rejects an empty variable name or one holding "=" or NUL,
// naming where it was found. Errors wrap ErrInvalid.
func CheckName(where, name string) error {
	return checkName(where, name)
}

// checkName rejects an empty name or one holding "=" or NUL.
func checkName(where, name string) error {
	switch {
	case name == "":
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s: empty variable name", where)
	case strings.IndexByte(name, 0) >= 0:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s: variable name %q contains a NUL byte", where, name)
	case strings.IndexByte(name, '=') >= 0:
		return sandbox.Errorf(sandbox.ErrInvalid, "sandbox: %s: variable name %q contains \"=\"", where, name)
	}
	return nil
}
