//go:build dshinterop

package dshinterop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// TestPathsMatchDsh: for random (cwd, session id) pairs, jsonl.Path names
// the file dsh's JSONL store locates, with both compressions and without
// a cwd.
func TestPathsMatchDsh(t *testing.T) {
	d := startDriver(t)
	r := newRand(t, "paths")
	n := caseCount(t)
	const root = "/sessions/root"
	cases := make([]map[string]any, n)
	want := make([]string, n)
	for i := range cases {
		id := randString(r)
		comp := []string{"zstd", "none"}[r.IntN(2)]
		c := map[string]any{"op": "locate", "root": root, "compression": comp, "id": id}
		cwd := ""
		switch r.IntN(10) {
		case 0:
		case 1:
			cwd = randString(r) // not absolute: both only encode it
		default:
			cwd = randPath(r)
		}
		if cwd != "" {
			c["cwd"] = cwd
		}
		cases[i] = c
		want[i] = jsonl.Path(root, session.Header{ID: id, Cwd: cwd}, jsonl.Compression(comp))
	}
	diffs := newDifferences("paths", n)
	for i, res := range d.run(t, cases) {
		var got struct {
			Kind string `json:"kind"`
			Path string `json:"path"`
		}
		_ = json.Unmarshal(res.raw, &got)
		if !res.OK || got.Kind != "jsonl" || got.Path != want[i] {
			diffs.add(fmt.Sprintf("case %s\n  dsh: %s  ours: %q", mustJSON(cases[i]), res.raw, want[i]))
		}
	}
	diffs.report(t)
}

// headerField is one way to write (or leave out) a header key.
type headerField struct {
	text    string // the JSON value as written; "" leaves the key out
	present bool
}

func jsString(s string) string { return string(session.AppendJSONString(nil, s)) }

// randHeaderLine writes a header line with random, often malformed,
// fields: numbers spelled 5.0, 1e3, -0, strings where numbers belong,
// null, "", keys in other cases, repeated keys, retired and unknown keys.
// It returns the line, the id to look the session up by and the path to
// store it at, and whether the line has a delegationDepth key.
func randHeaderLine(r *rand.Rand, root string) (line, lookup, path string, hasDepth bool) {
	id := randShort(r)
	cwd := randPath(r)
	// Per key: values dsh may accept (for some of them it does not: a
	// relative cwd, say) and values that are malformed. Most cases mutate
	// one or two keys, the rest none.
	options := map[string][2][]string{
		"type":    {{`"session"`}, {`"Session"`, `1`, ``}},
		"version": {{`0`, `0`, `0`, `0.0`, `-0`, `0e5`, `1e-400`}, {`1`, `-1`, `"0"`, `null`, ``}},
		"id":      {{jsString(id)}, {`""`, `5`, `null`, ``}},
		"createdAt": {{fmt.Sprint(r.Int64N(1 << 53)), `0`, `5.0`, `1e3`, `1.5e3`, `9007199254740991`, `1e-400`},
			{`-0`, `-0.0`, `"5"`, `null`, `-1`, `1.5`, `9007199254740992`, `1e400`, `-1e-400`, ``}},
		"cwd": {{``, ``, jsString(cwd), jsString(cwd), `"/"`, `"C:\\work\\agent"`, `"c:/work"`, `"\\\\server\\share"`},
			{jsString("rel" + cwd), `""`, `null`, `5`, `"C:work"`}},
		"parentSession":   {{``, ``, jsString(randString(r)), `""`}, {`null`, `5`}},
		"seedLength":      {{``, ``, fmt.Sprint(r.IntN(100)), `0`, `-0`, `5.0`}, {`-1`, `null`, `"3"`, `1.5`, `9007199254740992`}},
		"origin":          {{``, ``, `"subagent"`}, {`""`, `null`, `"fork"`}},
		"delegationDepth": {{`0`, `0`, fmt.Sprint(r.IntN(9)), `1.0`, `2e0`, ``}, {`-0`, `-1`, `null`, `"1"`, `0.5`}},
		"agentPreset":     {{``, ``, jsString(randString(r)), `""`}, {`null`, `5`}},
	}
	mutate := map[string]bool{}
	for range []int{0, 0, 1, 1, 2}[r.IntN(5)] {
		mutate[[]string{"type", "version", "id", "createdAt", "cwd", "parentSession", "seedLength", "origin", "delegationDepth", "agentPreset"}[r.IntN(10)]] = true
	}
	fields := map[string]string{}
	for k, opts := range options {
		set := opts[0]
		if mutate[k] {
			set = opts[1]
		}
		fields[k] = set[r.IntN(len(set))]
	}
	keys := []string{"type", "version", "id", "createdAt", "cwd", "parentSession", "seedLength", "origin", "delegationDepth", "agentPreset"}
	if r.IntN(3) == 0 {
		r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	}
	var members []string
	for _, k := range keys {
		if fields[k] != "" {
			members = append(members, jsString(k)+":"+fields[k])
		}
	}
	switch r.IntN(30) {
	case 0:
		members = append(members, `"sandboxMode":null`)
	case 1:
		members = append(members, `"approvalPolicy":"never"`)
	case 2:
		members = append(members, `"futureField":{"x":[1,2]}`)
	case 3:
		members = append(members, `"ID":"other"`, `"CreatedAt":1`)
	case 4:
		members = append(members, `"id":`+jsString(id)) // repeated key: the last wins
	case 5:
		members = append(members, `"cwd":null`)
	}
	line = "{" + strings.Join(members, ",") + "}"
	if r.IntN(40) == 0 {
		line = " " + strings.ReplaceAll(line, ",", " ,\t") + " "
	}
	lookup = "lookup"
	if fields["id"] == jsString(id) {
		lookup = id
	}
	h := session.Header{ID: lookup}
	var windowsCwd string
	if fields["cwd"] == jsString(cwd) {
		h.Cwd = cwd
	} else if json.Unmarshal([]byte(fields["cwd"]), &windowsCwd) == nil && session.IsAbsCwd(windowsCwd) {
		h.Cwd = windowsCwd // stored where a dsh on Windows would store it
	}
	return line, lookup, jsonl.Path(root, h, jsonl.CompressionNone), fields["delegationDepth"] != ""
}

// dshHeader is a header as dsh's store loads it.
type dshHeader struct {
	ID              string   `json:"id"`
	CreatedAt       float64  `json:"createdAt"`
	Cwd             *string  `json:"cwd"`
	ParentSession   *string  `json:"parentSession"`
	SeedLength      *float64 `json:"seedLength"`
	Origin          *string  `json:"origin"`
	DelegationDepth *float64 `json:"delegationDepth"`
	AgentPreset     *string  `json:"agentPreset"`
}

// ours converts a dsh header to session.Header. parentSession and
// agentPreset "" are kept (EmptyParentSession, EmptyAgentPreset); dsh's
// absent delegationDepth is 0.
func (h dshHeader) ours() session.Header {
	out := session.Header{ID: h.ID, CreatedAt: int64(h.CreatedAt)}
	if h.Cwd != nil {
		out.Cwd = *h.Cwd
	}
	if h.ParentSession != nil {
		out.ParentSession, out.EmptyParentSession = *h.ParentSession, *h.ParentSession == ""
	}
	if h.SeedLength != nil {
		n := int64(*h.SeedLength)
		out.SeedLength = &n
	}
	if h.Origin != nil {
		out.Origin = *h.Origin
	}
	if h.DelegationDepth != nil {
		out.DelegationDepth = int(*h.DelegationDepth)
	}
	if h.AgentPreset != nil {
		out.AgentPreset, out.EmptyAgentPreset = *h.AgentPreset, *h.AgentPreset == ""
	}
	return out
}

// TestHeadersLoadLikeDsh: a log whose header line is random (often
// malformed) loads in dsh-sandbox exactly when it loads in dsh, with the
// same header, and a version dsh refuses as unsupported is refused here
// with ErrUnsupportedVersion.
func TestHeadersLoadLikeDsh(t *testing.T) {
	d := startDriver(t)
	r := newRand(t, "headers")
	n := caseCount(t)
	base := t.TempDir()
	cases := make([]map[string]any, n)
	type ourResult struct {
		h        session.Header
		err      error
		line     string
		hasDepth bool
	}
	ours := make([]ourResult, n)
	for i := range cases {
		root := filepath.Join(base, fmt.Sprint(i))
		line, lookup, path, hasDepth := randHeaderLine(r, root)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cases[i] = map[string]any{"op": "load", "root": root, "compression": "none", "id": lookup}
		st, err := jsonl.New(jsonl.Options{Root: root, Compression: jsonl.CompressionNone})
		if err != nil {
			t.Fatal(err)
		}
		log, err := st.Load(context.Background(), lookup)
		ours[i] = ourResult{err: err, line: line, hasDepth: hasDepth}
		if err == nil {
			ours[i].h = log.Header
		}
		st.Close()
	}
	diffs := newDifferences("headers", n)
	var loaded, refused int
	for i, res := range d.run(t, cases) {
		o := ours[i]
		show := func() string {
			return fmt.Sprintf("header line %s\n  dsh: %s  ours: %+v, %v", o.line, strings.TrimSpace(string(res.raw)), o.h, o.err)
		}
		switch {
		case res.OK && o.err == nil:
			var got struct {
				Header dshHeader `json:"header"`
			}
			if err := json.Unmarshal(res.raw, &got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got.Header.ours(), o.h) {
				diffs.add(show())
			}
			loaded++
		case !res.OK && o.err != nil:
			refused++
			if os.Getenv("DSH_INTEROP_DEBUG") != "" {
				t.Logf("refused: %s | %s | %v", o.line, res.Error, o.err)
			}
			if res.Unsupported != errors.Is(o.err, session.ErrUnsupportedVersion) {
				diffs.add(show())
			}
		case !res.OK && o.err == nil && !filepath.IsAbs(o.h.Cwd) && session.IsAbsCwd(o.h.Cwd) && strings.Contains(res.Error, "absolute"):
			diffs.allow("a Windows cwd loads (dsh on Windows writes it; dsh on Linux refuses it)")
		case !res.OK && !o.hasDepth && strings.Contains(res.Error, "not a session header"):
			diffs.allow("a header without delegationDepth loads with depth 0 (dsh 0.1 refuses it; older dsh wrote it)")
		default:
			diffs.add(show())
		}
	}
	t.Logf("headers: %d loaded by both, %d refused by both", loaded, refused)
	if loaded < n/10 || refused < n/10 {
		t.Errorf("headers: %d loaded and %d refused of %d: the generator no longer covers both sides", loaded, refused, n)
	}
	diffs.report(t)
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
