package sandboxtest

import (
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/childenv"
)

// shellOwnedEnv are the variables a shell adds to the environment it
// passes on (bash: PWD, SHLVL, _; busybox sh also OLDPWD). They are
// allowed in `env` output on top of the expected set; the
// /proc/$$/environ case allows nothing extra.
var shellOwnedEnv = []string{"PWD", "SHLVL", "_", "OLDPWD"}

// expectedEnv computes, independently of prepare.Call, the complete
// environment a child of req must receive: childenv.Build over the
// layers of DESIGN §3.6 — the image env; req.Policy.EnvInherit read with
// getenv; the policy's env.set in name order, then req.Env; the
// snapshot req.DSHEnv.
func expectedEnv(imageEnv []string, req *sandbox.Request, getenv func(string) (string, bool)) ([]string, error) {
	ordinary := make([]string, 0, len(req.Policy.EnvSet)+len(req.Env))
	for _, k := range slices.Sorted(maps.Keys(req.Policy.EnvSet)) {
		ordinary = append(ordinary, k+"="+req.Policy.EnvSet[k])
	}
	ordinary = append(ordinary, req.Env...)
	return childenv.Build(childenv.Input{
		Base:         imageEnv,
		Inherit:      req.Policy.EnvInherit,
		AllowSecrets: req.Policy.EnvAllowSecrets,
		Getenv:       getenv,
		Ordinary:     ordinary,
		Snapshot:     req.DSHEnv,
	})
}

// parseEnv0 parses NUL-terminated KEY=VALUE entries (`env -0`,
// /proc/PID/environ). A malformed or repeated entry is an error naming
// it.
func parseEnv0(text string) (map[string]string, error) {
	env := make(map[string]string)
	text = strings.TrimSuffix(text, "\x00")
	if text == "" {
		return env, nil
	}
	for i, e := range strings.Split(text, "\x00") {
		name, value, ok := strings.Cut(e, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("entry %d %q is not NAME=VALUE", i, short(e))
		}
		if _, dup := env[name]; dup {
			return nil, fmt.Errorf("entry %d: %s is set twice", i, name)
		}
		env[name] = value
	}
	return env, nil
}

// envMap turns sorted KEY=VALUE entries into a map.
func envMap(entries []string) map[string]string {
	m := make(map[string]string, len(entries))
	for _, e := range entries {
		k, v, _ := strings.Cut(e, "=")
		m[k] = v
	}
	return m
}

// diffEnv compares a child's environment with the expected one. Names
// in extraOK may appear in got without being expected. It returns one
// line per difference, sorted; values are shown because every variable
// here is either the image's or planted by the suite.
func diffEnv(got, want map[string]string, extraOK []string) []string {
	var diffs []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("missing %s (want %q)", k, w))
		case g != w:
			diffs = append(diffs, fmt.Sprintf("%s = %q, want %q", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok && !slices.Contains(extraOK, k) {
			diffs = append(diffs, fmt.Sprintf("unexpected %s=%q", k, g))
		}
	}
	slices.Sort(diffs)
	return diffs
}

// hostileEnv are variables the suite plants in the service's environment
// (with t.Setenv) and lists in Policy.EnvInherit: every one but
// SANDBOXTEST_INHERITED must stay out of the child.
var hostileEnv = []struct{ name, value string }{
	{"DSH_STALE", "stale-from-process"},
	{"DSH_SESSION_ID", "stale-session-from-process"},
	{"DSH_SESSION_JSONL", "/stale/from/process/session.jsonl"},
	{"DSH_HOME", "/stale/home"},
	{"dsh_lower", "stale-lowercase"},
	{"OPENAI_API_KEY", "sk-sandboxtest-not-a-real-key"},
	{"GITHUB_TOKEN", "ghp-sandboxtest-not-a-real-token"},
	{"DB_PASSWORD", "sandboxtest-password"},
	{"AWS_SECRET_ACCESS_KEY", "sandboxtest-secret"},
	{"MY_CREDENTIALS_FILE", "/sandboxtest/credentials"},
	{"api_key", "sandboxtest-lowercase-key"},
	// LD_PRELOAD itself would also reach the runtimes the backend starts;
	// any LD_ name exercises the same filter.
	{"LD_SANDBOXTEST", "sandboxtest-ld"},
	{"SANDBOXTEST_INHERITED", "inherited-value"},
}

// plantHostileEnv sets hostileEnv and a variable no policy lists in the
// process environment for the rest of the case, and returns the names to
// add to Policy.EnvInherit (every planted name but the unlisted one, and
// one that is not set at all).
func plantHostileEnv(t *testing.T) []string {
	t.Helper()
	names := []string{"SANDBOXTEST_NOT_SET"}
	for _, v := range hostileEnv {
		t.Setenv(v.name, v.value)
		names = append(names, v.name)
	}
	t.Setenv("SANDBOXTEST_NOT_LISTED", "not-listed")
	t.Setenv("SANDBOXTEST_NOT_SET", "") // restored after the case
	if err := os.Unsetenv("SANDBOXTEST_NOT_SET"); err != nil {
		t.Fatalf("unset SANDBOXTEST_NOT_SET: %v", err)
	}
	return names
}

// childEnv runs `env -0` for req and returns the child's environment.
func (s *suite) childEnv(t *testing.T, req *sandbox.Request) map[string]string {
	t.Helper()
	req.Command = "env -0"
	res := s.runOK(t, req)
	env, err := parseEnv0(res.Stdout.Text)
	if err != nil {
		t.Fatalf("parse `env -0` output: %v", err)
	}
	return env
}
