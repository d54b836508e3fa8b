//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// execJSON runs exec --json with args before -- and decodes the result.
func execJSON(t *testing.T, e env, args []string, command string) (result, map[string]any) {
	t.Helper()
	full := append(append(append([]string{"exec"}, e.flags("")...), "--runtime", "runc", "--json"), args...)
	r := run(t, nil, append(full, "--", command)...)
	var res map[string]any
	_ = json.Unmarshal([]byte(r.stdout), &res) // nil when it printed no result

	return r, res
}

// TestExecNarrowingFlags: --memory and --pids tighten the call's limits
// (a call that fits the policy fails under the narrower limit, and runs
// without the flag); asking more than the policy allows is refused naming
// the flag, exit 2, before anything runs; --mount is refused under a
// policy without mountRoots (TestExecMountUnderRoots has those); the
// env file's ordinary keys reach the call and its DSH_* keys do not.
func TestExecNarrowingFlags(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)

	hog := `x=$(head -c 100000000 /dev/zero | tr "\0" a); echo ${#x}`
	r, res := execJSON(t, e, nil, hog)
	if r.code != 0 || res["oomKilled"] != false {
		t.Fatalf("100 MB in bash under the policy's 1Gi = %d, %v (stderr %q); want it to run", r.code, res, r.stderr)
	}
	r, res = execJSON(t, e, []string{"--memory", "64Mi", "--cpus", "0.5", "--timeout", "60s", "--network", "none"}, hog)
	if res["oomKilled"] != true {
		t.Errorf("100 MB in bash with --memory 64Mi = %d, %v (stderr %q); want OOM-killed", r.code, res, r.stderr)
	}

	forks := `for i in $(seq 20); do sleep 1 & done; wait; echo forked`
	const eagain = "Resource temporarily unavailable" // fork refused by the task limit
	r, res = execJSON(t, e, nil, forks)
	if stderr, _ := res["stderr"].(map[string]any); r.code != 0 || !strings.Contains(r.stdout, `forked`) || strings.Contains(r.stdout, eagain) {
		t.Fatalf("20 children under the policy's 256 tasks = %d %q (stderr %v)", r.code, r.stdout, stderr)
	}
	r, _ = execJSON(t, e, []string{"--pids", "8"}, forks)
	if !strings.Contains(r.stdout, eagain) {
		t.Errorf("20 children with --pids 8 = %d %q; want forks refused (%s)", r.code, r.stdout, eagain)
	}

	for _, tc := range []struct {
		flags []string
		name  string
	}{
		{[]string{"--memory", "2Gi"}, "--memory"},
		{[]string{"--memory", "lots"}, "--memory"},
		{[]string{"--cpus", "2"}, "--cpus"},
		{[]string{"--pids", "257"}, "--pids"},
		{[]string{"--timeout", "601s"}, "--timeout"},
		{[]string{"--network", "loopback"}, "--network"},
		{[]string{"--mount", e.workspace + ":/data:ro"}, "--mount"},
	} {
		marker := filepath.Join(e.workspace, "ran")
		r, _ := execJSON(t, e, tc.flags, "touch "+marker)
		if r.code != 2 || !strings.Contains(r.stderr, tc.name) {
			t.Errorf("exec %v = %d, stderr %q; want exit 2 naming %s", tc.flags, r.code, r.stderr, tc.name)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Errorf("exec %v ran the command", tc.flags)
			os.Remove(marker)
		}
	}

	envFile := filepath.Join(t.TempDir(), "call.env")
	if err := os.WriteFile(envFile, []byte("# settings\nGREETING=hello world\nDSH_SESSION_ID=forged\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, _ = execJSON(t, e, []string{"--env-file", envFile}, `echo "$GREETING"; env | grep -c forged`)
	if out := strings.TrimSpace(r.stdout); !strings.Contains(out, `"hello world\n0\n"`) || !strings.Contains(r.stderr, "DSH_SESSION_ID") {
		t.Errorf("exec --env-file = %d, %q (stderr %q); want GREETING set, the DSH_* key dropped with a warning", r.code, r.stdout, r.stderr)
	}
	if err := os.WriteFile(envFile, []byte("A=1\nnot a line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, _ = execJSON(t, e, []string{"--env-file", envFile}, "true")
	if r.code != 2 || !strings.Contains(r.stderr, envFile+":2") {
		t.Errorf("exec --env-file with a malformed line 2 = %d, stderr %q; want exit 2 naming the line", r.code, r.stderr)
	}
}
