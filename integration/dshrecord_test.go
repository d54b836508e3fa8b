//go:build integration

package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// The request-recording tests run the real dsh (its own packages, pinned
// in integrations/dsh) with this project's ctx.shell provider against a
// real `dsh-sandbox serve` and the replay model, through
// integrations/dsh/e2e/dshrecord.ts. For every call they compare three
// records of the same facts: the trusted dshEnv snapshot dsh handed the
// provider (which sends it to the service unchanged, and the service
// refuses one that differs from its own), the service's audit record
// (session, env names, mounts) and what the command itself printed.

// dshRecordOut is what e2e/dshrecord.ts prints.
type dshRecordOut struct {
	Agents []struct {
		SessionID string          `json:"sessionId"`
		Header    json.RawMessage `json:"header"`
		Location  *struct {
			Kind, Path string
		} `json:"location"`
		TurnEnd struct {
			Kind string `json:"kind"`
		} `json:"turnEnd"`
		ToolResults []string `json:"toolResults"`
		Jobs        []struct {
			ID, Status, Output string
		} `json:"jobs"`
	} `json:"agents"`
	Calls []struct {
		Background bool              `json:"background"`
		SessionID  *string           `json:"sessionId"`
		DSHEnv     map[string]string `json:"dshEnv"`
	} `json:"calls"`
	NoAgent *struct {
		DSHEnv   map[string]string `json:"dshEnv"`
		ExitCode *int              `json:"exitCode"`
		Stdout   string            `json:"stdout"`
		Stderr   string            `json:"stderr"`
	} `json:"noAgent"`
}

// runDSHRecord runs e2e/dshrecord.ts with cfg; dsh's own environment
// holds stale DSH_* values that must never reach a call.
func runDSHRecord(t *testing.T, p dshProvider, e env, sv *service, cfg map[string]any) dshRecordOut {
	t.Helper()
	stdout := runDSHDriver(t, p, e, sv, "dshrecord.ts", cfg,
		"DSH_SESSION_JSONL="+filepath.Join(e.root, "stale", "session.jsonl"))
	var out dshRecordOut
	if err := json.Unmarshal(stdout, &out); err != nil {
		t.Fatalf("dsh's output %q: %v", stdout, err)
	}
	for _, a := range out.Agents {
		if a.TurnEnd.Kind != "completed" {
			t.Fatalf("session %s's turn ended %q, want completed (tool results %q)", a.SessionID, a.TurnEnd.Kind, a.ToolResults)
		}
	}
	return out
}

// factsOf parses a command's KEY=VALUE lines; other lines (dsh's
// [exit code: N] and the like) are left out.
func factsOf(text string) map[string]string {
	facts := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && k != "" && !strings.ContainsAny(k, " []") {
			facts[k] = v
		}
	}
	return facts
}

// resultFor is the one tool result whose facts say call=name.
func resultFor(t *testing.T, results []string, name string) map[string]string {
	t.Helper()
	var found []map[string]string
	for _, r := range results {
		if f := factsOf(r); f["call"] == name {
			found = append(found, f)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d tool results of call=%s, want 1: %q", len(found), name, results)
	}
	return found[0]
}

// readAudit is every record of the service's audit log.
func readAudit(t *testing.T, path string) []api.AuditRecord {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []api.AuditRecord
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec api.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("audit line %q: %v", sc.Bytes(), err)
		}
		out = append(out, rec)
	}
	return out
}

// dshNames are the DSH_* names of an env name list, sorted.
func dshNames(names []string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, "DSH_") {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// mountsUnder are the mount targets of rec inside root, each with "(ro)"
// or "(rw)".
func mountsUnder(rec api.AuditRecord, root string) []string {
	var out []string
	for _, m := range rec.Mounts {
		if m.Target == root || strings.HasPrefix(m.Target, root+"/") || strings.HasPrefix(m.Source, root+"/") {
			mode := "(rw)"
			if m.ReadOnly {
				mode = "(ro)"
			}
			out = append(out, m.Target+mode)
		}
	}
	return out
}

// checkCallFacts compares what a call printed with the snapshot dsh
// handed the provider (want).
func checkCallFacts(t *testing.T, what string, facts, want map[string]string) {
	t.Helper()
	get := func(k string) string {
		if v, ok := want[k]; ok {
			return v
		}
		return "absent"
	}
	for _, c := range []struct{ fact, key string }{
		{"id", "DSH_SESSION_ID"}, {"jsonl", "DSH_SESSION_JSONL"}, {"home", "DSH_HOME"}, {"shell", "DSH_SHELL"},
	} {
		if facts[c.fact] != get(c.key) {
			t.Errorf("%s saw %s=%q, dsh's snapshot has %s=%q", what, c.fact, facts[c.fact], c.key, get(c.key))
		}
	}
	if facts["stale"] != "absent" {
		t.Errorf("%s saw dsh's stale DSH_STALE_SENTINEL=%q", what, facts["stale"])
	}
	if keys := strings.Join(slices.Sorted(maps.Keys(want)), " ") + " "; facts["keys"] != keys {
		t.Errorf("%s saw DSH_* keys %q, want exactly dsh's snapshot's %q", what, facts["keys"], keys)
	}
	host, _ := os.Hostname()
	if facts["host"] == "" || facts["host"] == host {
		t.Errorf("%s ran with hostname %q, want a container's own (host %q)", what, facts["host"], host)
	}
	wantMount := ""
	if _, ok := want["DSH_SESSION_JSONL"]; ok {
		wantMount = "ro"
	}
	if facts["mount"] != wantMount {
		t.Errorf("%s saw its session directory mounted %q, want %q", what, facts["mount"], wantMount)
	}
}

// TestDSHRecordJSONL: dsh with its JSONL persistence. A foreground and a
// background call get the current session's snapshot (the service's
// audit names the same keys and the read-only session directory; the
// call prints the same values); a call whose tool arguments carry a
// model-supplied env and stdin runs without them; a call with no agent
// has no DSH_SESSION_* and no transcript mount.
func TestDSHRecordJSONL(t *testing.T) {
	requireRoot(t)
	p := requireDSH(t)
	e := newEnv(t)
	sv := startServe(t, e)
	base := startReplayModel(t, "--script", filepath.Join("testdata", "dshrecord.json"))
	id := "rec-" + uniqueSuffix()
	out := runDSHRecord(t, p, e, sv, map[string]any{
		"baseURL": base, "server": "unix://" + checkedSocket(t, sv.sock), "home": e.home, "cwd": e.workspace,
		"persistence": "jsonl", "sessionsRoot": e.root, "sessionId": id,
		"task":           "Print the session's DSH_* facts.",
		"noAgentCommand": noAgentCommand(t),
	})
	transcript := jsonl.Path(e.root, session.Header{ID: id, Cwd: e.workspace}, jsonl.CompressionZstd)
	want := map[string]string{"DSH_HOME": e.home, "DSH_SHELL": "1", "DSH_SESSION_ID": id, "DSH_SESSION_JSONL": transcript}
	checkRecordedSession(t, e, sv, out, id, want)
	if a := out.Agents[0]; a.Location == nil || a.Location.Kind != "jsonl" || a.Location.Path != transcript {
		t.Errorf("dsh located session %s at %+v, want jsonl %s", id, a.Location, transcript)
	}
}

// TestDSHRecordSQLite: dsh with its SQLite persistence and `serve
// --persistence sqlite`: there is no transcript, so no call gets
// DSH_SESSION_JSONL and none mounts a session directory.
func TestDSHRecordSQLite(t *testing.T) {
	requireRoot(t)
	p := requireDSH(t)
	e := newEnv(t)
	db := filepath.Join(e.home, "sessions.sqlite")
	sv := startServe(t, e, "--persistence", "sqlite", "--sqlite-path", db)
	base := startReplayModel(t, "--script", filepath.Join("testdata", "dshrecord.json"))
	id := "rec-" + uniqueSuffix()
	out := runDSHRecord(t, p, e, sv, map[string]any{
		"baseURL": base, "server": "unix://" + checkedSocket(t, sv.sock), "home": e.home, "cwd": e.workspace,
		"persistence": "sqlite", "sqlitePath": db, "sessionId": id,
		"task":           "Print the session's DSH_* facts.",
		"noAgentCommand": noAgentCommand(t),
	})
	want := map[string]string{"DSH_HOME": e.home, "DSH_SHELL": "1", "DSH_SESSION_ID": id}
	checkRecordedSession(t, e, sv, out, id, want)
	if a := out.Agents[0]; a.Location != nil {
		t.Errorf("dsh's SQLite persistence located session %s at %+v, want no transcript", id, a.Location)
	}
	if entries, err := os.ReadDir(e.root); err != nil || len(entries) != 0 {
		t.Errorf("the sessions root %s holds %d entries (%v), want none with SQLite persistence", e.root, len(entries), err)
	}
}

// noAgentCommand is what the call with no agent runs: the facts script
// of testdata/dshrecord.json's foreground call, as call=none.
func noAgentCommand(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "dshrecord.json"))
	if err != nil {
		t.Fatal(err)
	}
	var script struct {
		Responses []struct {
			ToolCalls []struct {
				ID        string `json:"id"`
				Arguments struct {
					Command string `json:"command"`
				} `json:"arguments"`
			} `json:"tool_calls"`
		} `json:"responses"`
	}
	if err := json.Unmarshal(data, &script); err != nil {
		t.Fatal(err)
	}
	for _, r := range script.Responses {
		for _, c := range r.ToolCalls {
			if c.ID == "call_fg" {
				return strings.Replace(c.Arguments.Command, `echo "call=fg"`, `echo "call=none"`, 1)
			}
		}
	}
	t.Fatal("testdata/dshrecord.json has no call_fg")
	return ""
}

// checkRecordedSession checks one run of testdata/dshrecord.json in
// session id whose snapshot is want.
func checkRecordedSession(t *testing.T, e env, sv *service, out dshRecordOut, id string, want map[string]string) {
	t.Helper()
	if len(out.Agents) != 1 || out.Agents[0].SessionID != id {
		t.Fatalf("dsh ran agents %+v, want session %s alone", out.Agents, id)
	}
	a := out.Agents[0]

	// What dsh handed the provider: the current session's snapshot, for
	// the foreground and the background call alike; the stale values of
	// dsh's own environment are not in it.
	var fg, bg, none int
	for _, c := range out.Calls {
		switch {
		case c.SessionID == nil:
			none++
			if wantNone := map[string]string{"DSH_HOME": e.home, "DSH_SHELL": "1"}; !maps.Equal(c.DSHEnv, wantNone) {
				t.Errorf("the call with no agent got snapshot %v, want %v", c.DSHEnv, wantNone)
			}
			continue
		case c.Background:
			bg++
		default:
			fg++
		}
		if !maps.Equal(c.DSHEnv, want) {
			t.Errorf("dsh handed the provider snapshot %v (background %v), want %v", c.DSHEnv, c.Background, want)
		}
	}
	// Foreground: the facts call and the one with model-supplied env.
	if fg != 2 || bg != 1 || none != 1 {
		t.Errorf("the provider got %d foreground, %d background and %d agentless calls, want 2, 1, 1", fg, bg, none)
	}

	// What the calls printed.
	checkCallFacts(t, "the foreground call", resultFor(t, a.ToolResults, "fg"), want)
	if len(a.Jobs) != 1 || a.Jobs[0].Status != "completed" {
		t.Fatalf("background jobs %+v, want one completed", a.Jobs)
	}
	checkCallFacts(t, "the background call", factsOf(a.Jobs[0].Output), want)
	if f := factsOf(a.Jobs[0].Output); f["call"] != "bg" {
		t.Errorf("the background job printed %q, want the call=bg facts", a.Jobs[0].Output)
	}
	forged := resultFor(t, a.ToolResults, "forged")
	if forged["forged"] != "absent" || forged["id"] != id || forged["stdin"] != "0" {
		t.Errorf("the call whose arguments carried env and stdin saw forged=%q id=%q stdin=%q bytes, want absent, %q, 0", forged["forged"], forged["id"], forged["stdin"], id)
	}
	if out.NoAgent == nil || out.NoAgent.ExitCode == nil || *out.NoAgent.ExitCode != 0 {
		t.Fatalf("the call with no agent: %+v, want exit 0", out.NoAgent)
	}
	checkCallFacts(t, "the call with no agent", factsOf(out.NoAgent.Stdout), map[string]string{"DSH_HOME": e.home, "DSH_SHELL": "1"})

	// What the service recorded: the session, the same DSH_* names, the
	// read-only session directory exactly when there is a transcript, and
	// nothing of the session for the call with no agent.
	wantNames := slices.Sorted(maps.Keys(want))
	var dir []string
	if j, ok := want["DSH_SESSION_JSONL"]; ok {
		dir = []string{filepath.Dir(j) + "(ro)"}
	}
	var sessFG, sessBG, agentless int
	for _, rec := range readAudit(t, sv.audit) {
		switch rec.SessionID {
		case id:
			if rec.Background {
				sessBG++
			} else {
				sessFG++
			}
			if got := dshNames(rec.EnvNames); !slices.Equal(got, wantNames) {
				t.Errorf("audit of %s (background %v) names DSH_* %v, want %v", rec.ExecutionID, rec.Background, got, wantNames)
			}
			if got := mountsUnder(rec, e.root); !slices.Equal(got, dir) {
				t.Errorf("audit of %s (background %v) mounts %v of the sessions root, want %v", rec.ExecutionID, rec.Background, got, dir)
			}
		case "":
			agentless++
			if got, want := dshNames(rec.EnvNames), []string{"DSH_HOME", "DSH_SHELL"}; !slices.Equal(got, want) {
				t.Errorf("audit of the call with no agent names DSH_* %v, want %v", got, want)
			}
			if got := mountsUnder(rec, e.root); len(got) != 0 {
				t.Errorf("audit of the call with no agent mounts %v of the sessions root, want none", got)
			}
		default:
			t.Errorf("audit record of session %q, want only %s or none", rec.SessionID, id)
		}
	}
	if sessFG != 2 || sessBG != 1 || agentless != 1 {
		t.Errorf("audit: %d foreground and %d background calls of %s, %d with no agent; want 2, 1, 1", sessFG, sessBG, id, agentless)
	}
}

// TestDSHRecordParentAndChildren: a parent session and two children
// spawned the way dsh's subagent runtime spawns them (origin "subagent",
// parentSession, delegationDepth 1) call bash concurrently: each call
// waits until all three are in their containers. Three distinct session
// ids and transcript paths; each call sees only its own, in dsh's
// snapshot, in its environment and in its mounts, and the service's
// audit agrees; after the turn the children's transcripts carry their
// lineage.
func TestDSHRecordParentAndChildren(t *testing.T) {
	requireRoot(t)
	p := requireDSH(t)
	e := newEnv(t)
	sv := startServe(t, e)
	base := startReplayModel(t, "--script", filepath.Join("testdata", "dshrecord-family.json"))
	suffix := uniqueSuffix()
	parent, kids := "parent-"+suffix, []string{"child-a-" + suffix, "child-b-" + suffix}
	out := runDSHRecord(t, p, e, sv, map[string]any{
		"baseURL": base, "server": "unix://" + checkedSocket(t, sv.sock), "home": e.home, "cwd": e.workspace,
		"persistence": "jsonl", "sessionsRoot": e.root, "sessionId": parent, "children": kids,
		"task": "Print your session's DSH_* facts.",
	})
	if len(out.Agents) != 3 {
		t.Fatalf("dsh ran %d agents, want 3", len(out.Agents))
	}
	paths := map[string]string{}
	for i, a := range out.Agents {
		h, err := session.Parse(withType(t, a.Header))
		if err != nil {
			t.Fatalf("header %s: %v", a.Header, err)
		}
		wantID, wantParent, wantOrigin, wantDepth := parent, "", "", 0
		if i > 0 {
			wantID, wantParent, wantOrigin, wantDepth = kids[i-1], parent, "subagent", 1
		}
		if h.ID != wantID || h.ParentSession != wantParent || h.Origin != wantOrigin || h.DelegationDepth != wantDepth || h.Cwd != e.workspace {
			t.Errorf("agent %d's header %+v, want id %s, parent %q, origin %q, depth %d, cwd %s", i, h, wantID, wantParent, wantOrigin, wantDepth, e.workspace)
		}
		transcript := jsonl.Path(e.root, session.Header{ID: h.ID, Cwd: e.workspace}, jsonl.CompressionZstd)
		paths[h.ID] = transcript
		want := map[string]string{"DSH_HOME": e.home, "DSH_SHELL": "1", "DSH_SESSION_ID": h.ID, "DSH_SESSION_JSONL": transcript}
		if len(a.ToolResults) != 1 {
			t.Fatalf("session %s has tool results %q, want one", h.ID, a.ToolResults)
		}
		facts := factsOf(a.ToolResults[0])
		if facts["barrier"] != "met" {
			t.Errorf("session %s's call printed barrier=%q: the three calls did not all run at once", h.ID, facts["barrier"])
		}
		checkCallFacts(t, "session "+h.ID+"'s call", facts, want)
		// Its session directory's parent (the project directory) shows
		// only its own session: the others' are not mounted.
		if got, wantSib := facts["siblings"], filepath.Base(filepath.Dir(transcript))+" "; got != wantSib {
			t.Errorf("session %s's call sees session directories %q, want only its own %q", h.ID, got, wantSib)
		}
	}
	if len(paths) != 3 || len(slices.Compact(slices.Sorted(maps.Values(paths)))) != 3 {
		t.Errorf("transcripts %v, want three distinct", paths)
	}

	// What dsh handed the provider: one call per session, each with its
	// own snapshot.
	seen := map[string]bool{}
	for _, c := range out.Calls {
		if c.SessionID == nil || paths[*c.SessionID] == "" || c.Background {
			t.Errorf("the provider got a call of session %v (background %v), want one of %v in the foreground", c.SessionID, c.Background, slices.Sorted(maps.Keys(paths)))
			continue
		}
		seen[*c.SessionID] = true
		want := map[string]string{"DSH_HOME": e.home, "DSH_SHELL": "1", "DSH_SESSION_ID": *c.SessionID, "DSH_SESSION_JSONL": paths[*c.SessionID]}
		if !maps.Equal(c.DSHEnv, want) {
			t.Errorf("session %s's call got snapshot %v, want %v", *c.SessionID, c.DSHEnv, want)
		}
	}
	if len(out.Calls) != 3 || len(seen) != 3 {
		t.Errorf("the provider got %d calls of %d sessions, want 3 of 3", len(out.Calls), len(seen))
	}

	// What the service recorded: one call per session, each mounting only
	// its own session directory, read-only.
	audited := map[string]int{}
	for _, rec := range readAudit(t, sv.audit) {
		audited[rec.SessionID]++
		transcript, ok := paths[rec.SessionID]
		if !ok {
			t.Errorf("audit record of session %q, want one of %v", rec.SessionID, slices.Sorted(maps.Keys(paths)))
			continue
		}
		if got, want := mountsUnder(rec, e.root), []string{filepath.Dir(transcript) + "(ro)"}; !slices.Equal(got, want) {
			t.Errorf("audit of session %s mounts %v of the sessions root, want %v", rec.SessionID, got, want)
		}
	}
	for id := range paths {
		if audited[id] != 1 {
			t.Errorf("audit holds %d calls of session %s, want 1", audited[id], id)
		}
	}

	// After the turn: each child's transcript carries its lineage, as
	// `dsh-sandbox session show` reads it.
	for _, kid := range kids {
		show := run(t, nil, "session", "show", "--json", paths[kid])
		if show.code != 0 {
			t.Fatalf("session show %s exited %d: %s", paths[kid], show.code, show.stderr)
		}
		var shown struct {
			Header json.RawMessage `json:"header"`
		}
		if err := json.Unmarshal([]byte(show.stdout), &shown); err != nil {
			t.Fatalf("session show output %q: %v", show.stdout, err)
		}
		h, err := session.Parse(shown.Header)
		if err != nil {
			t.Fatalf("stored header %s: %v", shown.Header, err)
		}
		if h.ID != kid || h.ParentSession != parent || h.Origin != "subagent" || h.DelegationDepth != 1 {
			t.Errorf("session show reads %s's header %+v, want parent %s, origin subagent, depth 1", kid, h, parent)
		}
	}
}
