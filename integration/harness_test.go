//go:build integration

package integration

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api/client"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
)

// The harness trust boundary (DESIGN §3.12) against the real service: a
// harness's dshEnv never names the transcript to mount nor overrides a
// built-in; extra DSH_* keys come only from a harness client. Each attack
// is refused naming the field and runs nothing; the legitimate variant
// runs with the service's own values.
func TestHarnessDSHEnvBoundary(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	addr := freeTCP(t)
	tokens := writeTokens(t, "ci tok-ci-0123456789\ndsh tok-dsh-0123456789 harness\n")
	sv := startServe(t, e, "--listen", "unix://"+filepath.Join(e.home, "run", "sandbox.sock"), "--listen", "tcp://"+addr, "--token-file", tokens)
	ctx := context.Background()
	tcp := func(token string) *client.Client {
		c, err := newClient(t, "tcp://"+addr, client.Options{Token: token})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ci, dsh := tcp("tok-ci-0123456789"), tcp("tok-dsh-0123456789")

	// What dsh's own registry computes for a session, independently of
	// the service: the home, the shell marker, the id and dsh's Locate
	// (zstd, the default of both).
	snapshot := func(id string) map[string]string {
		return map[string]string{
			"DSH_HOME":          e.home,
			"DSH_SHELL":         "1",
			"DSH_SESSION_ID":    id,
			"DSH_SESSION_JSONL": jsonl.Path(e.root, *e.header(id), jsonl.CompressionZstd),
		}
	}
	marker := filepath.Join(e.workspace, "ran")
	touch := "touch '" + marker + "'"

	// A second session of the same client, whose transcript a tampered
	// request would like to see.
	victim := snapshot("victim")["DSH_SESSION_JSONL"]
	if err := os.MkdirAll(filepath.Dir(victim), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(victim, []byte("secret transcript\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	attacks := []struct {
		name  string
		cl    *client.Client
		id    string
		env   map[string]string
		field string
	}{
		{"OtherSessionsTranscript", sv.cl, "s1", withKV(snapshot("s1"), "DSH_SESSION_JSONL", victim), "dshEnv.DSH_SESSION_JSONL"},
		{"TranscriptOutsideRoot", sv.cl, "s1", withKV(snapshot("s1"), "DSH_SESSION_JSONL", "/etc/session.jsonl"), "dshEnv.DSH_SESSION_JSONL"},
		{"UncompressedName", sv.cl, "s1", withKV(snapshot("s1"), "DSH_SESSION_JSONL", strings.TrimSuffix(snapshot("s1")["DSH_SESSION_JSONL"], ".zstd")), "dshEnv.DSH_SESSION_JSONL"},
		{"WrongSessionID", sv.cl, "s1", withKV(snapshot("s1"), "DSH_SESSION_ID", "wrong"), "dshEnv.DSH_SESSION_ID"},
		{"WrongHome", sv.cl, "s1", withKV(snapshot("s1"), "DSH_HOME", "/root/.dsh"), "dshEnv.DSH_HOME"},
		{"ExtraKeyFromNonHarness", ci, "s-ci", withKV(snapshot("s-ci"), "DSH_PLUGIN_NOTE", "x"), "dshEnv.DSH_PLUGIN_NOTE"},
	}
	for _, a := range attacks {
		t.Run(a.name, func(t *testing.T) {
			rr := types.RunRequest{Session: e.header(a.id), Policy: "workspace-write", Command: touch, DSHEnv: a.env}
			_, err := a.cl.Run(ctx, rr)
			var fe *types.FieldError
			if statusOf(err) != 403 || !asField(err, &fe) || fe.Field != a.field {
				t.Errorf("Run = %v (status %d), want 403 naming %s", err, statusOf(err), a.field)
			}
			if _, err := a.cl.StartJob(ctx, rr); statusOf(err) != 403 {
				t.Errorf("StartJob = %v, want 403", err)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("the refused request ran its command")
			}
		})
	}

	// The legitimate variants. The socket peer (a harness) sends dsh's
	// snapshot plus a key of its own registry; the command sees the
	// service's values and that key, and the session directory read-only.
	probe := `env | grep '^DSH_' | sort; echo x > "$DSH_SESSION_JSONL" 2>/dev/null && echo WROTE || echo READONLY`
	want := snapshot("s1")
	rr := types.RunRequest{Session: e.header("s1"), Policy: "workspace-write", Command: probe, DSHEnv: withKV(want, "DSH_PLUGIN_NOTE", "from the harness")}
	resp, err := sv.cl.Run(ctx, rr)
	if err != nil {
		t.Fatalf("socket harness: Run(dsh's snapshot) = %v", err)
	}
	wantOut := strings.Join([]string{
		"DSH_HOME=" + want["DSH_HOME"],
		"DSH_PLUGIN_NOTE=from the harness",
		"DSH_SESSION_ID=s1",
		"DSH_SESSION_JSONL=" + want["DSH_SESSION_JSONL"],
		"DSH_SHELL=1",
		"READONLY",
	}, "\n") + "\n"
	if got := resp.Result.Stdout.Text; got != wantOut {
		t.Errorf("socket harness: the call printed\n%s\nwant\n%s", got, wantOut)
	}
	if _, err := os.Stat(want["DSH_SESSION_JSONL"]); err == nil {
		t.Errorf("the call created the transcript %s", want["DSH_SESSION_JSONL"])
	}
	// A harness token client may add keys too; a plain token client may
	// send the built-ins only.
	resp, err = dsh.Run(ctx, types.RunRequest{Session: e.header("s-dsh"), Policy: "workspace-write", Command: "echo $DSH_PLUGIN_NOTE", DSHEnv: withKV(snapshot("s-dsh"), "DSH_PLUGIN_NOTE", "tcp harness")})
	if err != nil || resp.Result.Stdout.Text != "tcp harness\n" {
		t.Errorf("harness token client: Run = %+v, %v; want it to print its key", resp, err)
	}
	resp, err = ci.Run(ctx, types.RunRequest{Session: e.header("s-ci"), Policy: "workspace-write", Command: "echo $DSH_SESSION_ID", DSHEnv: snapshot("s-ci")})
	if err != nil || resp.Result.Stdout.Text != "s-ci\n" {
		t.Errorf("plain token client with the built-ins: Run = %+v, %v; want s-ci", resp, err)
	}
	if data, err := os.ReadFile(victim); err != nil || string(data) != "secret transcript\n" {
		t.Errorf("the victim's transcript = %q, %v; want it untouched", data, err)
	}
}

func withKV(m map[string]string, kv ...string) map[string]string {
	out := maps.Clone(m)
	for i := 0; i+1 < len(kv); i += 2 {
		out[kv[i]] = kv[i+1]
	}
	return out
}

func asField(err error, fe **types.FieldError) bool {
	return err != nil && errors.As(err, fe)
}
