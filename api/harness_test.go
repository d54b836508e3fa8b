package api_test

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// harnessSnapshot is what dsh's own registry would send for session id in
// the fixture: the fixture's home and fakeLocator's transcript.
func harnessSnapshot(id string) map[string]string {
	return map[string]string{
		"DSH_HOME":          "/home/dsh",
		"DSH_SHELL":         "1",
		"DSH_SESSION_ID":    id,
		"DSH_SESSION_JSONL": "/sessions/" + id + "/session.jsonl",
	}
}

func with(m map[string]string, kv ...string) map[string]string {
	out := maps.Clone(m)
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] == "<absent>" {
			delete(out, kv[i])
			continue
		}
		out[kv[i]] = kv[i+1]
	}
	return out
}

// TestServerHarnessEnvChecked: the harness's DSH_* snapshot never
// overrides the service's built-ins; a tampered or missing one is
// refused naming the key and nothing runs. The legitimate snapshot, plus
// an extra key of the harness's own registry, runs with that key applied
// last.
func TestServerHarnessEnvChecked(t *testing.T) {
	f := newFixture(t, &fakeExec{}, nil) // a socket peer: a harness client
	ctx := context.Background()
	good := harnessSnapshot("s1")
	cases := []struct {
		name    string
		noAgent bool
		env     map[string]string
		status  int
		field   string
	}{
		{"TamperedJSONL", false, with(good, "DSH_SESSION_JSONL", "/sessions/other/session.jsonl"), 403, "dshEnv.DSH_SESSION_JSONL"},
		{"JSONLOfTheRoot", false, with(good, "DSH_SESSION_JSONL", "/"), 403, "dshEnv.DSH_SESSION_JSONL"},
		{"MissingJSONL", false, with(good, "DSH_SESSION_JSONL", "<absent>"), 403, "dshEnv.DSH_SESSION_JSONL"},
		{"WrongID", false, with(good, "DSH_SESSION_ID", "wrong"), 403, "dshEnv.DSH_SESSION_ID"},
		{"WrongHome", false, with(good, "DSH_HOME", "/root/.dsh"), 403, "dshEnv.DSH_HOME"},
		{"ShellZero", false, with(good, "DSH_SHELL", "0"), 403, "dshEnv.DSH_SHELL"},
		{"IDWithoutAgent", true, map[string]string{"DSH_HOME": "/home/dsh", "DSH_SHELL": "1", "DSH_SESSION_ID": "s1"}, 403, "dshEnv.DSH_SESSION_ID"},
		{"JSONLWithoutAgent", true, map[string]string{"DSH_HOME": "/home/dsh", "DSH_SHELL": "1", "DSH_SESSION_JSONL": "/sessions/s1/session.jsonl"}, 403, "dshEnv.DSH_SESSION_JSONL"},
		{"LowerCaseKey", false, with(good, "dsh_session_jsonl", "/x"), 400, "dshEnv.dsh_session_jsonl"},
		{"NotDSH", false, with(good, "LD_PRELOAD", "/x.so"), 400, "dshEnv.LD_PRELOAD"},
		{"NulValue", false, with(good, "DSH_EXTRA", "a\x00b"), 400, "dshEnv.DSH_EXTRA"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rr := types.RunRequest{Session: header("s1", f.work), Policy: policy.WorkspaceWrite, Command: "true", DSHEnv: tc.env}
			if tc.noAgent {
				rr.Session, rr.Cwd = nil, f.work
			}
			_, err := f.cl.Run(ctx, rr)
			if api.HTTPStatus(err) != tc.status || fieldOf(err) != tc.field {
				t.Errorf("Run(dshEnv %s) = %v (status %d), want %d naming %s", tc.name, err, api.HTTPStatus(err), tc.status, tc.field)
			}
			if err != nil && strings.Contains(err.Error(), "/sessions/s1/session.jsonl") {
				t.Errorf("Run(dshEnv %s) error reveals an env value: %v", tc.name, err)
			}
			if _, err := f.cl.StartJob(ctx, rr); api.HTTPStatus(err) != tc.status || fieldOf(err) != tc.field {
				t.Errorf("StartJob(dshEnv %s) = %v, want %d naming %s", tc.name, err, tc.status, tc.field)
			}
		})
	}
	if n := f.exec.calls.Load(); n != 0 {
		t.Fatalf("refused requests ran %d calls", n)
	}

	// The legitimate variants: the same snapshot, with an extra key of the
	// harness's registry; no snapshot at all; a call with no agent.
	rr := types.RunRequest{Session: header("s1", f.work), Policy: policy.WorkspaceWrite, Command: "true", DSHEnv: with(good, "DSH_PLUGIN_X", "v=1")}
	if _, err := f.cl.Run(ctx, rr); err != nil {
		t.Fatalf("Run(matching dshEnv) = %v, want it run", err)
	}
	want := "DSH_HOME=/home/dsh,DSH_PLUGIN_X=v=1,DSH_SESSION_ID=s1,DSH_SESSION_JSONL=/sessions/s1/session.jsonl,DSH_SHELL=1"
	req := f.exec.lastRequest()
	if got := strings.Join(req.DSHEnv, ","); got != want {
		t.Errorf("executor got DSHEnv %q, want %q", got, want)
	}
	if req.Session.TranscriptDir != "/sessions/s1" {
		t.Errorf("executor got transcript dir %q, want /sessions/s1 (the service's own Locate)", req.Session.TranscriptDir)
	}
	rr.DSHEnv = nil
	if _, err := f.cl.Run(ctx, rr); err != nil {
		t.Errorf("Run(no dshEnv) = %v, want it run", err)
	}
	noAgent := types.RunRequest{Cwd: f.work, Policy: policy.WorkspaceWrite, Command: "true", DSHEnv: map[string]string{"DSH_HOME": "/home/dsh", "DSH_SHELL": "1"}}
	if _, err := f.cl.Run(ctx, noAgent); err != nil {
		t.Errorf("Run(no agent, matching dshEnv) = %v, want it run", err)
	}
	if got := strings.Join(f.exec.lastRequest().DSHEnv, ","); got != "DSH_HOME=/home/dsh,DSH_SHELL=1" {
		t.Errorf("executor got DSHEnv %q for a call with no agent, want home and shell only", got)
	}
}

// TestServerHarnessExtraKeysNeedHarness: only a token client marked as a
// harness may add DSH_* keys beyond the service's; every client may send
// the matching built-ins.
func TestServerHarnessExtraKeysNeedHarness(t *testing.T) {
	f := newFixture(t, &fakeExec{}, nil)
	_, cls := serveTokens(t, f, []api.TokenClient{{Name: "ci", Token: "tok-ci"}, {Name: "dsh", Token: "tok-dsh", Harness: true}})
	ctx := context.Background()
	extra := with(harnessSnapshot("s-ci"), "DSH_PLUGIN_X", "1")
	if _, err := cls["ci"].Run(ctx, types.RunRequest{Session: header("s-ci", f.work), Policy: policy.WorkspaceWrite, Command: "true", DSHEnv: extra}); api.HTTPStatus(err) != 403 || fieldOf(err) != "dshEnv.DSH_PLUGIN_X" {
		t.Errorf("non-harness token client adding DSH_PLUGIN_X = %v, want 403 naming dshEnv.DSH_PLUGIN_X", err)
	}
	if n := f.exec.calls.Load(); n != 0 {
		t.Fatalf("the refused request ran %d calls", n)
	}
	if _, err := cls["ci"].Run(ctx, types.RunRequest{Session: header("s-ci", f.work), Policy: policy.WorkspaceWrite, Command: "true", DSHEnv: harnessSnapshot("s-ci")}); err != nil {
		t.Errorf("non-harness token client with the built-ins only = %v, want it run", err)
	}
	extra = with(harnessSnapshot("s-dsh"), "DSH_PLUGIN_X", "1")
	if _, err := cls["dsh"].Run(ctx, types.RunRequest{Session: header("s-dsh", f.work), Policy: policy.WorkspaceWrite, Command: "true", DSHEnv: extra}); err != nil {
		t.Fatalf("harness token client adding DSH_PLUGIN_X = %v, want it run", err)
	}
	if got := strings.Join(f.exec.lastRequest().DSHEnv, ","); !strings.Contains(got, "DSH_PLUGIN_X=1") {
		t.Errorf("executor got DSHEnv %q, want DSH_PLUGIN_X=1 in it", got)
	}
}

// TestServerTranscriptOutsideSessionsRoot: a transcript the service's own
// Locate puts outside its configured sessions root is refused and nothing
// is mounted; inside it the call runs.
func TestServerTranscriptOutsideSessionsRoot(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, &fakeExec{}, func(o *api.Options) { o.SessionsRoot = "/elsewhere" })
	rr := types.RunRequest{Session: header("s1", f.work), Policy: policy.WorkspaceWrite, Command: "true"}
	if _, err := f.cl.Run(ctx, rr); api.HTTPStatus(err) != 403 || fieldOf(err) != "session.cwd" {
		t.Errorf("Run(transcript outside the root) = %v, want 403 naming session.cwd", err)
	}
	rr.DSHEnv = harnessSnapshot("s1")
	if _, err := f.cl.Run(ctx, rr); api.HTTPStatus(err) != 403 || fieldOf(err) != "dshEnv.DSH_SESSION_JSONL" {
		t.Errorf("Run(transcript outside the root, dshEnv) = %v, want 403 naming dshEnv.DSH_SESSION_JSONL", err)
	}
	if n := f.exec.calls.Load(); n != 0 {
		t.Fatalf("refused requests ran %d calls", n)
	}
	// The session directory must lie strictly inside the root.
	g := newFixture(t, &fakeExec{}, func(o *api.Options) { o.SessionsRoot = "/sessions/s1" })
	if _, err := g.cl.Run(ctx, rr); api.HTTPStatus(err) != 403 {
		t.Errorf("Run(transcript directory = the root) = %v, want 403", err)
	}
	h := newFixture(t, &fakeExec{}, func(o *api.Options) { o.SessionsRoot = "/sessions/" })
	if _, err := h.cl.Run(ctx, rr); err != nil {
		t.Errorf("Run(transcript inside the root) = %v, want it run", err)
	}
	if got := h.exec.lastRequest(); got == nil || got.Session.TranscriptDir != "/sessions/s1" {
		t.Errorf("executor got %+v, want transcript dir /sessions/s1", got)
	}
	opts := api.Options{Executor: &fakeExec{}, Policies: map[string]sandbox.Policy{"p": {}}, Registry: overlay.NewRegistry(), Home: "/h", SessionsRoot: "rel"}
	if _, err := api.NewServer(opts); err == nil || !strings.Contains(err.Error(), "SessionsRoot") {
		t.Errorf("NewServer(relative SessionsRoot) = %v, want an error naming SessionsRoot", err)
	}
}
