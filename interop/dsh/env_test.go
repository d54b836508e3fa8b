//go:build dshinterop

package dshinterop

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/contributors"
	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/persistence/jsonl"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// randHomeValue returns a random configured home or $DSH_HOME value:
// "~", "~/…", "~\…", "~user", relative and absolute paths, and blanks
// that JavaScript's trim and Go's TrimSpace disagree on. Never NUL, which
// no environment variable or flag can carry.
func randHomeValue(r *rand.Rand) string {
	s := strings.ReplaceAll(randShort(r), "\x00", "")
	switch r.IntN(10) {
	case 0:
		return "~"
	case 1:
		return "~/" + s
	case 2:
		return `~\` + s
	case 3:
		return "~" + s
	case 4:
		return []string{"", " ", "\t\n", "\ufeff", "\u0085", "\u00a0 ", "\u2028", "\u3000"}[r.IntN(8)]
	case 5:
		return s
	default:
		return strings.ReplaceAll(randPath(r), "\x00", "")
	}
}

// TestHomeMatchesDsh: contributors.ResolveHome (with UserHome) resolves
// the dsh home as dsh's resolveDshHome does, for random explicit values,
// $DSH_HOME values and $HOME set, empty or unset.
func TestHomeMatchesDsh(t *testing.T) {
	d := startDriver(t)
	r := newRand(t, "home")
	n := caseCount(t)
	cwd, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(cwd)
	t.Setenv("HOME", "")
	cases := make([]map[string]any, n)
	type ours struct {
		home string
		err  error
	}
	got := make([]ours, n)
	for i := range cases {
		c := map[string]any{"op": "home", "cwd": cwd}
		env := map[string]string{}
		explicit := ""
		if r.IntN(3) == 0 {
			explicit = strings.ReplaceAll(randHomeValue(r), "\x00", "")
			if explicit != "" { // "" means "not given" here (documented)
				c["configured"] = explicit
			}
		}
		if r.IntN(2) == 0 {
			env["DSH_HOME"] = randHomeValue(r)
			c["dshHome"] = env["DSH_HOME"]
		}
		switch r.IntN(4) {
		case 0:
			os.Unsetenv("HOME")
		case 1:
			os.Setenv("HOME", "")
			c["home"] = ""
		case 2:
			os.Setenv("HOME", "rel/home")
			c["home"] = "rel/home"
		default:
			h := strings.ReplaceAll(randPath(r), "\x00", "") // an environment variable cannot hold NUL
			os.Setenv("HOME", h)
			c["home"] = h
		}
		cases[i] = c
		home, err := contributors.ResolveHome(explicit, func(k string) string { return env[k] }, nil)
		got[i] = ours{home, err}
	}
	diffs := newDifferences("home", n)
	for i, res := range d.run(t, cases) {
		var dsh struct {
			Home string `json:"home"`
		}
		_ = json.Unmarshal(res.raw, &dsh)
		if !res.OK || got[i].err != nil || dsh.Home != got[i].home {
			diffs.add(fmt.Sprintf("case %s\n  dsh: %s  ours: %q, %v", mustJSON(cases[i]), strings.TrimSpace(string(res.raw)), got[i].home, got[i].err))
		}
	}
	diffs.report(t)
}

// noLocation is a store without per-session files (SQLite).
type noLocation struct{}

func (noLocation) Locate(session.Header) (persistence.Location, bool) {
	return persistence.Location{}, false
}

// TestShellEnvMatchesDsh: the DSH_* snapshot of a call (the built-in
// contributors over the JSONL store, plain or zstd, or SQLite; with and
// without an agent) is dsh's shell-env snapshot, key for key.
func TestShellEnvMatchesDsh(t *testing.T) {
	d := startDriver(t)
	r := newRand(t, "shell-env")
	n := caseCount(t)
	cwd, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Chdir(cwd)
	const root = "/var/dsh/sessions"
	cases := make([]map[string]any, n)
	want := make([][]string, n)
	for i := range cases {
		dshHome := strings.ReplaceAll(randPath(r), "\x00", "") // a flag or variable cannot hold NUL
		if r.IntN(5) == 0 {
			dshHome = "~/" + strings.ReplaceAll(randShort(r), "\x00", "")
		}
		c := map[string]any{"op": "shellEnv", "dshHome": dshHome, "root": root}
		comp := []jsonl.Compression{jsonl.CompressionZstd, jsonl.CompressionNone}[r.IntN(2)]
		c["compression"] = string(comp)
		var loc persistence.Locator
		if r.IntN(5) == 0 {
			c["sqlite"] = true
			loc = noLocation{}
		} else {
			st, err := jsonl.New(jsonl.Options{Root: root, Compression: comp})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			loc = st
		}
		var h *session.Header
		if r.IntN(4) > 0 {
			hh := randLogHeader(r)
			h = &hh
			c["header"] = headerObject(hh)
		}
		cases[i] = c
		home, err := contributors.ResolveHome(dshHome, func(string) string { return "" }, nil)
		if err != nil {
			t.Fatal(err)
		}
		reg := overlay.NewRegistry()
		if _, err := contributors.Install(reg, func() persistence.Locator { return loc }); err != nil {
			t.Fatal(err)
		}
		snap, err := reg.Collect(context.Background(), overlay.Execution{Home: home, Session: h})
		if err != nil {
			if !strings.Contains(err.Error(), "NUL") {
				t.Fatal(err)
			}
			want[i] = nil // refused: see below
			continue
		}
		want[i] = snap.Environ()
	}
	diffs := newDifferences("shell-env", n)
	for i, res := range d.run(t, cases) {
		var dsh struct {
			Env map[string]string `json:"env"`
		}
		_ = json.Unmarshal(res.raw, &dsh)
		var got []string
		for k, v := range dsh.Env {
			got = append(got, k+"="+v)
		}
		slices.Sort(got)
		if want[i] == nil && res.OK && strings.Contains(mustJSON(dsh.Env), `\u0000`) {
			diffs.allow("a value with a NUL byte is refused when the snapshot is collected (dsh fails later, when it spawns the shell)")
			continue
		}
		if !res.OK || !slices.Equal(got, want[i]) {
			diffs.add(fmt.Sprintf("case %s\n  dsh: %s  ours: %q", mustJSON(cases[i]), strings.TrimSpace(string(res.raw)), want[i]))
		}
	}
	diffs.report(t)
}
