package sandboxtest

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// envCases check the child's environment (DESIGN §3.6).
func envCases() []testCase {
	return []testCase{
		{name: "env-exact", run: testEnvExact},
		{name: "env-exact-proc-environ", run: testEnvExactProcEnviron},
		{name: "env-stale-dsh-dropped", run: testEnvStaleDSHDropped},
		{name: "env-secret-inherit-dropped", run: testEnvSecretInheritDropped},
		{name: "env-inherit-by-name", run: testEnvInheritByName},
		{name: "env-ordinary-cannot-displace-dsh", run: testEnvOrdinaryCannotDisplaceDSH},
		{name: "env-terminal-settings", run: testEnvTerminalSettings},
		{name: "env-no-session", run: testEnvNoSession},
		{name: "env-no-carryover", run: testEnvNoCarryover},
	}
}

// exactEnvRequest is a call whose environment uses every layer: the
// hostile process env inherited by name, a policy env.set, ordinary env
// and the snapshot.
func (s *suite) exactEnvRequest(t *testing.T, fx *fixture, command string) *envRequest {
	t.Helper()
	req := s.request(fx, command)
	req.Policy.EnvInherit = append(req.Policy.EnvInherit, plantHostileEnv(t)...)
	if req.Policy.EnvSet == nil {
		req.Policy.EnvSet = map[string]string{}
	}
	req.Policy.EnvSet["SANDBOXTEST_SET"] = "from-policy"
	req.Env = append(req.Env, "SANDBOXTEST_ORDINARY=from-request")
	want, err := expectedEnv(s.cfg.ImageEnv, req, os.LookupEnv)
	if err != nil {
		t.Fatalf("expectedEnv: %v", err)
	}
	return &envRequest{req: req, want: envMap(want)}
}

// testEnvExact: the full `env -0` of the child is exactly the expected
// set, apart from the variables the shell itself exports.
func testEnvExact(t *testing.T, s *suite) {
	fx := newFixture(t)
	er := s.exactEnvRequest(t, fx, "env -0")
	got := s.childEnv(t, er.req)
	if pwd, ok := got["PWD"]; ok && pwd != fx.Workspace {
		t.Errorf("child PWD = %q, want the workdir %q", pwd, fx.Workspace)
	}
	if d := diffEnv(got, er.want, shellOwnedEnv); len(d) > 0 {
		t.Errorf("child env differs from BuildEnv(image env, policy, request, snapshot):\n  %s", strings.Join(d, "\n  "))
	}
	er.checkFacts(t, fx, got)
}

// testEnvExactProcEnviron: the environment the shell was started with
// (/proc/$$/environ) is exactly the expected set: the backend and any
// init it uses add nothing.
func testEnvExactProcEnviron(t *testing.T, s *suite) {
	fx := newFixture(t)
	// A second command keeps bash from exec'ing cat in its own place,
	// so $$ is the shell the backend started.
	er := s.exactEnvRequest(t, fx, "cat /proc/$$/environ; exit 0")
	res := s.runOK(t, er.req)
	got, err := parseEnv0(res.Stdout.Text)
	if err != nil {
		t.Fatalf("parse /proc/$$/environ: %v", err)
	}
	if d := diffEnv(got, er.want, nil); len(d) > 0 {
		t.Errorf("/proc/$$/environ differs from BuildEnv(image env, policy, request, snapshot):\n  %s", strings.Join(d, "\n  "))
	}
	er.checkFacts(t, fx, got)
}

// envRequest is a request and the environment its child must see.
type envRequest struct {
	req  *sandbox.Request
	want map[string]string
}

// checkFacts asserts, without childenv.Build, the facts of DESIGN §3.6 that
// the exact-env cases rest on, so that a bug shared by childenv.Build and the
// backend cannot hide.
func (er *envRequest) checkFacts(t *testing.T, fx *fixture, got map[string]string) {
	t.Helper()
	for _, kv := range fx.snapshot() {
		k, v, _ := strings.Cut(kv, "=")
		if got[k] != v {
			t.Errorf("child %s = %q, want the snapshot's %q", k, got[k], v)
		}
	}
	for k := range got {
		if strings.HasPrefix(strings.ToUpper(k), "DSH_") && !slices.Contains(fx.snapshot(), k+"="+got[k]) {
			t.Errorf("child has %s=%q, which is not in the snapshot", k, got[k])
		}
	}
	for _, v := range hostileEnv {
		if v.name == "SANDBOXTEST_INHERITED" || strings.HasPrefix(strings.ToUpper(v.name), "DSH_") {
			continue
		}
		if _, ok := got[v.name]; ok {
			t.Errorf("child has %s although it is secret-shaped or LD_*", v.name)
		}
	}
	want := map[string]string{
		"SANDBOXTEST_INHERITED": "inherited-value",
		"SANDBOXTEST_SET":       "from-policy",
		"SANDBOXTEST_ORDINARY":  "from-request",
		"NO_COLOR":              "1",
		"TERM":                  "dumb",
		"PAGER":                 "cat",
		"GIT_PAGER":             "cat",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("child %s = %q, want %q", k, got[k], v)
		}
	}
	for _, k := range []string{"SANDBOXTEST_NOT_LISTED", "SANDBOXTEST_NOT_SET"} {
		if _, ok := got[k]; ok {
			t.Errorf("child has %s, which the policy does not inherit", k)
		}
	}
}

// testEnvStaleDSHDropped: DSH_* values in the service's environment —
// even when the policy lists them for inheritance — never reach the
// child; the snapshot's values win and names absent from it stay absent.
func testEnvStaleDSHDropped(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, "")
	req.Policy.EnvInherit = append(req.Policy.EnvInherit, plantHostileEnv(t)...)
	got := s.childEnv(t, req)
	for _, k := range []string{"DSH_STALE", "dsh_lower"} {
		if v, ok := got[k]; ok {
			t.Errorf("child has %s=%q from the service's environment", k, v)
		}
	}
	if got["DSH_SESSION_ID"] != fx.SessionID {
		t.Errorf("child DSH_SESSION_ID = %q, want the snapshot's %q", got["DSH_SESSION_ID"], fx.SessionID)
	}
	if got["DSH_SESSION_JSONL"] != fx.JSONL {
		t.Errorf("child DSH_SESSION_JSONL = %q, want the snapshot's %q", got["DSH_SESSION_JSONL"], fx.JSONL)
	}
	if got["DSH_HOME"] != fx.Home {
		t.Errorf("child DSH_HOME = %q, want the snapshot's %q", got["DSH_HOME"], fx.Home)
	}
}

// testEnvSecretInheritDropped: secret-shaped names and LD_* names listed
// in Policy.EnvInherit are still dropped.
func testEnvSecretInheritDropped(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, "")
	req.Policy.EnvInherit = append(req.Policy.EnvInherit, plantHostileEnv(t)...)
	got := s.childEnv(t, req)
	for _, k := range []string{"OPENAI_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "MY_CREDENTIALS_FILE", "api_key", "LD_SANDBOXTEST"} {
		if _, ok := got[k]; ok {
			t.Errorf("child has %s although the secret/LD_ filter must drop it", k)
		}
	}
	for k, v := range got {
		for _, h := range hostileEnv {
			if v == h.value && h.name != "SANDBOXTEST_INHERITED" {
				t.Errorf("child %s holds the value planted in %s", k, h.name)
			}
		}
	}
	if got["SANDBOXTEST_INHERITED"] != "inherited-value" {
		t.Errorf("child SANDBOXTEST_INHERITED = %q, want %q (the filter dropped too much)", got["SANDBOXTEST_INHERITED"], "inherited-value")
	}
}

// testEnvInheritByName: only listed names are inherited, and their
// values are read at call time.
func testEnvInheritByName(t *testing.T, s *suite) {
	fx := newFixture(t)
	t.Setenv("SANDBOXTEST_LISTED", "first")
	t.Setenv("SANDBOXTEST_UNLISTED", "unlisted")
	req := s.request(fx, "")
	req.Policy.EnvInherit = append(req.Policy.EnvInherit, "SANDBOXTEST_LISTED")
	got := s.childEnv(t, req)
	if got["SANDBOXTEST_LISTED"] != "first" {
		t.Errorf("child SANDBOXTEST_LISTED = %q, want %q", got["SANDBOXTEST_LISTED"], "first")
	}
	if _, ok := got["SANDBOXTEST_UNLISTED"]; ok {
		t.Error("child has SANDBOXTEST_UNLISTED, which the policy does not list")
	}
	t.Setenv("SANDBOXTEST_LISTED", "second")
	got = s.childEnv(t, req)
	if got["SANDBOXTEST_LISTED"] != "second" {
		t.Errorf("child SANDBOXTEST_LISTED = %q after the service env changed, want %q (env must be read at call time)", got["SANDBOXTEST_LISTED"], "second")
	}
}

// testEnvOrdinaryCannotDisplaceDSH: DSH_* names in ordinary env
// (Request.Env and the policy's env.set) are dropped; the child sees the
// snapshot's values and nothing else in DSH_.
func testEnvOrdinaryCannotDisplaceDSH(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, "")
	req.Env = []string{
		"DSH_SESSION_ID=forged-by-request",
		"DSH_SESSION_JSONL=/forged/session.jsonl",
		"DSH_X=forged",
		"dsh_shell=0",
		"SANDBOXTEST_ORDINARY=kept",
	}
	if req.Policy.EnvSet == nil {
		req.Policy.EnvSet = map[string]string{}
	}
	req.Policy.EnvSet["DSH_HOME"] = "/forged/home"
	req.Policy.EnvSet["DSH_FROM_POLICY"] = "forged"
	got := s.childEnv(t, req)
	want := envMap(fx.snapshot())
	for k, v := range got {
		if !strings.HasPrefix(strings.ToUpper(k), "DSH_") {
			continue
		}
		if want[k] != v {
			t.Errorf("child %s = %q, want only the snapshot's DSH_* values %v", k, v, fx.snapshot())
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("child %s = %q, want the snapshot's %q", k, got[k], v)
		}
	}
	if got["SANDBOXTEST_ORDINARY"] != "kept" {
		t.Errorf("child SANDBOXTEST_ORDINARY = %q, want %q", got["SANDBOXTEST_ORDINARY"], "kept")
	}
}

// testEnvTerminalSettings: layer 3 is present by default and ordinary env
// (a later layer) may override it.
func testEnvTerminalSettings(t *testing.T, s *suite) {
	fx := newFixture(t)
	got := s.childEnv(t, s.request(fx, ""))
	for k, v := range map[string]string{"NO_COLOR": "1", "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat"} {
		if got[k] != v {
			t.Errorf("child %s = %q, want %q", k, got[k], v)
		}
	}
	req := s.request(fx, "")
	req.Env = []string{"TERM=xterm-256color"}
	if got := s.childEnv(t, req); got["TERM"] != "xterm-256color" {
		t.Errorf("child TERM = %q with Env TERM=xterm-256color, want the ordinary layer to win", got["TERM"])
	}
}

// testEnvNoSession: a call with no agent gets no session facts, even
// when the service's environment holds stale ones.
func testEnvNoSession(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, "")
	req.Policy.EnvInherit = append(req.Policy.EnvInherit, plantHostileEnv(t)...)
	req.Session = sandbox.Session{}
	req.DSHEnv = []string{"DSH_HOME=" + fx.Home, "DSH_SHELL=1"}
	got := s.childEnv(t, req)
	for _, k := range []string{"DSH_SESSION_ID", "DSH_SESSION_JSONL", "DSH_STALE"} {
		if v, ok := got[k]; ok {
			t.Errorf("child of a call with no agent has %s=%q, want it absent", k, v)
		}
	}
	if got["DSH_SHELL"] != "1" || got["DSH_HOME"] != fx.Home {
		t.Errorf("child DSH_SHELL, DSH_HOME = %q, %q, want %q, %q", got["DSH_SHELL"], got["DSH_HOME"], "1", fx.Home)
	}
}

// testEnvNoCarryover: nothing of one call's environment reaches the next.
func testEnvNoCarryover(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, "")
	req.Env = []string{"SANDBOXTEST_CARRY=1"}
	req.DSHEnv = append(fx.snapshot(), "DSH_SANDBOXTEST_EXTRA=1")
	slices.Sort(req.DSHEnv)
	if got := s.childEnv(t, req); got["SANDBOXTEST_CARRY"] != "1" || got["DSH_SANDBOXTEST_EXTRA"] != "1" {
		t.Fatalf("first call: SANDBOXTEST_CARRY, DSH_SANDBOXTEST_EXTRA = %q, %q, want 1, 1", got["SANDBOXTEST_CARRY"], got["DSH_SANDBOXTEST_EXTRA"])
	}
	got := s.childEnv(t, s.request(fx, ""))
	for _, k := range []string{"SANDBOXTEST_CARRY", "DSH_SANDBOXTEST_EXTRA"} {
		if _, ok := got[k]; ok {
			t.Errorf("second call has %s from the first call", k)
		}
	}
}
