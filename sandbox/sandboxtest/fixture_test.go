package sandboxtest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEncodeSegmentCases(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"abc-DEF_1.2", "abc-DEF_1.2"},
		{".", "~002E"},
		{"..", "~002E~002E"},
		{"a.", "a."},
		{"~", "~007E"},
		{"a/b", "a~002Fb"},
		{"开", "~5F00"},
		{"😀", "~D83D~DE00"}, // two UTF-16 units
		{"sp ace", "sp~0020ace"},
	} {
		got, err := encodeSegment(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("encodeSegment(%q) = %q, %v, want %q, nil", tc.in, got, err, tc.want)
		}
	}
	if got, err := encodeSegment(""); err == nil {
		t.Errorf("encodeSegment(%q) = %q, nil, want an error", "", got)
	}
}

func TestProjectKeyCases(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		// The examples of DESIGN §3.2.
		{"/srv/dev/deepseek-harness", "--srv-dev-deepseek-harness--"},
		{`C:\work\agent`, "--C-work-agent--"},
		{"/", "--root--"},
		{"/开发/~agent", "--~5F00~53D1-~007Eagent--"},
		{"", "--root--"},
		{"//a::b\\\\c", "--a-b-c--"},
		{"/tmp/TestRun/001", "--tmp-TestRun-001--"},
		{"/" + strings.Repeat("x", 300), "--" + strings.Repeat("x", 251) + "--"},
	} {
		if got := projectKey(tc.in); got != tc.want {
			t.Errorf("projectKey(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLayoutSessionCases(t *testing.T) {
	root := filepath.Join(t.TempDir(), "sessions")
	for _, tc := range []struct {
		cwd, id, wantRel string
	}{
		{"/srv/app", "s-1", "--srv-app--/s-1/session.jsonl"},
		{"/srv/app", "..", "--srv-app--/~002E~002E/session.jsonl"},
		{"/other", "id with space", "--other--/id~0020with~0020space/session.jsonl"},
	} {
		s, err := layoutSession(root, tc.cwd, tc.id)
		if err != nil {
			t.Fatalf("layoutSession(%q, %q) error = %v", tc.cwd, tc.id, err)
		}
		if got := filepath.ToSlash(strings.TrimPrefix(s.File, root+string(filepath.Separator))); got != tc.wantRel {
			t.Errorf("layoutSession(%q, %q) file = %q, want %q", tc.cwd, tc.id, got, tc.wantRel)
		}
		if s.Dir != filepath.Dir(s.File) {
			t.Errorf("layoutSession(%q, %q) dir = %q, want the file's directory", tc.cwd, tc.id, s.Dir)
		}
		for path, mode := range map[string]os.FileMode{s.Dir: 0o700, filepath.Dir(s.Dir): 0o700, s.File: 0o600} {
			fi, err := os.Stat(path)
			if err != nil || fi.Mode().Perm() != mode {
				t.Errorf("mode of %s = %v (err %v), want %v", path, fi.Mode().Perm(), err, mode)
			}
		}
		data, err := os.ReadFile(s.File)
		if err != nil || string(data) != string(s.Header) {
			t.Fatalf("session.jsonl = %q (err %v), want the header %q", data, err, s.Header)
		}
		checkHeader(t, data, tc.id, tc.cwd)
	}
}

// checkHeader asserts that line is one dsh header line (DESIGN §3.1):
// compact JSON, keys in dsh's order, newline-terminated.
func checkHeader(t *testing.T, line []byte, id, cwd string) {
	t.Helper()
	if strings.Count(string(line), "\n") != 1 || !strings.HasSuffix(string(line), "\n") {
		t.Errorf("header %q, want exactly one line ending in a newline", line)
	}
	wantPrefix := `{"type":"session","version":0,"id":`
	if !strings.HasPrefix(string(line), wantPrefix) {
		t.Errorf("header %q, want it to begin %q", line, wantPrefix)
	}
	keys := []string{`"type"`, `"version"`, `"id"`, `"createdAt"`, `"cwd"`, `"delegationDepth"`}
	last := -1
	for _, k := range keys {
		i := strings.Index(string(line), k+":")
		if i <= last {
			t.Errorf("header %q: key %s out of order", line, k)
		}
		last = i
	}
	var h map[string]any
	if err := json.Unmarshal(line, &h); err != nil {
		t.Fatalf("header %q: %v", line, err)
	}
	if h["id"] != id || h["cwd"] != cwd || h["delegationDepth"] != 0.0 {
		t.Errorf("header %v, want id %q, cwd %q, delegationDepth 0", h, id, cwd)
	}
}

func TestNewFixture(t *testing.T) {
	fx := newFixture(t)
	if want := filepath.Join(fx.Home, "sessions"); fx.SessionsRoot != want {
		t.Errorf("SessionsRoot = %q, want %q", fx.SessionsRoot, want)
	}
	if want := filepath.Join(fx.SessionsRoot, projectKey(fx.Workspace)); fx.ProjectDir != want {
		t.Errorf("ProjectDir = %q, want %q", fx.ProjectDir, want)
	}
	if want := filepath.Join(fx.ProjectDir, fx.SessionID, "session.jsonl"); fx.JSONL != want {
		t.Errorf("JSONL = %q, want %q", fx.JSONL, want)
	}
	checkHeader(t, fx.Header, fx.SessionID, fx.Workspace)
	want := []string{
		"DSH_HOME=" + fx.Home,
		"DSH_SESSION_ID=" + fx.SessionID,
		"DSH_SESSION_JSONL=" + fx.JSONL,
		"DSH_SHELL=1",
	}
	if got := fx.snapshot(); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("snapshot() = %q, want %q (sorted)", got, want)
	}
	if other := newFixture(t); other.SessionID == fx.SessionID || other.Workspace == fx.Workspace {
		t.Errorf("two fixtures share session id %q or workspace %q", fx.SessionID, fx.Workspace)
	}
}

func TestEventLine(t *testing.T) {
	line := eventLine(3, "hello <&>")
	var ev struct {
		Type string            `json:"type"`
		Seq  int               `json:"seq"`
		Data map[string]string `json:"data"`
	}
	if err := json.Unmarshal(line, &ev); err != nil || ev.Type != "user/message" || ev.Seq != 3 || ev.Data["text"] != "hello <&>" {
		t.Errorf("eventLine(3, %q) = %q (err %v), want a user/message event with seq 3", "hello <&>", line, err)
	}
	if line[len(line)-1] != '\n' {
		t.Errorf("eventLine = %q, want a trailing newline", line)
	}
}
