package render

import (
	"bufio"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func exit(n int) *int { return &n }

func TestRenderGolden(t *testing.T) {
	tests := []struct {
		name string
		res  sandbox.Result
	}{
		{"plain", sandbox.Result{ExitCode: exit(0), Stdout: sandbox.Stream{Text: "hello\nworld\n"}}},
		{"plain_no_newline", sandbox.Result{ExitCode: exit(0), Stdout: sandbox.Stream{Text: "42"}}},
		{"stderr_only", sandbox.Result{ExitCode: exit(1), Stderr: sandbox.Stream{Text: "bash: nope: command not found\n"}}},
		{"both", sandbox.Result{ExitCode: exit(0), Stdout: sandbox.Stream{Text: "out line"}, Stderr: sandbox.Stream{Text: "warning: careful\n"}}},
		{"no_output", sandbox.Result{ExitCode: exit(0)}},
		{"no_output_nonzero", sandbox.Result{ExitCode: exit(3)}},
		{"truncated_inside", sandbox.Result{ExitCode: exit(0), Stdout: sandbox.Stream{
			Text: "line 99998\nline 99999\n", Truncated: true, DroppedBytes: 1088866,
			SpillPath:   "/home/u/.dsh/sessions/--work-app--/0190a1b2/spill/call-7f3a.stdout",
			SpillInside: true,
		}}},
		{"truncated_outside", sandbox.Result{ExitCode: exit(0), Stdout: sandbox.Stream{
			Text: "tail\n", Truncated: true, DroppedBytes: 70000,
			SpillPath: "/var/lib/dsh-sandbox/spill/call-7f3a.stdout",
		}}},
		{"truncated_unavailable", sandbox.Result{ExitCode: exit(0), Stdout: sandbox.Stream{Text: "tail", Truncated: true, DroppedBytes: 9}}},
		{"truncated_both_streams", sandbox.Result{ExitCode: exit(2),
			Stdout: sandbox.Stream{Text: "o", Truncated: true, DroppedBytes: 1, SpillPath: "/s/spill/c.stdout", SpillInside: true},
			Stderr: sandbox.Stream{Text: "e", Truncated: true, DroppedBytes: 1, SpillPath: "/s/spill/c.stderr", SpillInside: true},
		}},
		{"timed_out", sandbox.Result{TimedOut: true, TimeoutMs: 120000, Signal: "SIGTERM", Stdout: sandbox.Stream{Text: "waiting...\n"}}},
		{"timed_out_trapped", sandbox.Result{TimedOut: true, TimeoutMs: 500, ExitCode: exit(0)}},
		{"signal", sandbox.Result{Signal: "SIGKILL", Stdout: sandbox.Stream{Text: "allocating\n"}}},
		{"aborted", sandbox.Result{Aborted: true, Signal: "SIGTERM", TimeoutMs: 120000}},
		{"nonzero_exit", sandbox.Result{ExitCode: exit(127), Stdout: sandbox.Stream{Text: "---random pick---\n"}, Stderr: sandbox.Stream{Text: "bash: shuf: command not found\n"}}},
		{"unknown_status", sandbox.Result{Stdout: sandbox.Stream{Text: "x\n"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Result(&tt.res)
			path := filepath.Join("testdata", "render_"+tt.name+".golden")
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("Result(%s) = %q, want %q", tt.name, got, want)
			}
		})
	}
	if got := Result(nil); got != "" {
		t.Errorf("Result(nil) = %q, want \"\"", got)
	}
}

// TestRenderDSHFixtures renders the bash results recorded in real dsh
// session logs from their parsed parts and expects dsh's exact text.
func TestRenderDSHFixtures(t *testing.T) {
	dir := fixtures.DSHSessions(t)
	files, err := filepath.Glob(filepath.Join(dir, "*.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		for _, text := range bashResultTexts(t, f) {
			if strings.Contains(text, "[sandbox:") {
				continue // dsh's file-sandbox markers have no counterpart here
			}
			res := parseRendered(text)
			if got := Result(&res); got != text {
				t.Errorf("%s: Result(%+v) = %q, want dsh's %q", filepath.Base(f), res, got, text)
			}
			checked++
		}
	}
	t.Logf("checked %d bash results from %d dsh logs", checked, len(files))
	if checked < 5 {
		t.Errorf("checked %d bash results from the fixtures, want at least 5", checked)
	}
}

// bashResultTexts returns the text of every tool result in a dsh log whose
// call was to the bash tool, found by walking every JSON value.
func bashResultTexts(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	bashIDs := map[string]bool{}
	type result struct{ id, text string }
	var results []result
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["name"] == "bash" {
				if id, ok := v["id"].(string); ok {
					bashIDs[id] = true
				}
			}
			if v["type"] == "tool-result" {
				id, _ := v["toolCallId"].(string)
				if blocks, ok := v["content"].([]any); ok && len(blocks) == 1 {
					if b, ok := blocks[0].(map[string]any); ok && b["type"] == "text" {
						text, _ := b["text"].(string)
						results = append(results, result{id, text})
					}
				}
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		var v any
		if json.Unmarshal(sc.Bytes(), &v) == nil {
			walk(v)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range results {
		if bashIDs[r.id] {
			out = append(out, r.text)
		}
	}
	return out
}

// parseRendered splits a rendered bash result back into a Result. It
// handles what the fixtures hold: plain streams and status markers.
func parseRendered(text string) sandbox.Result {
	res := sandbox.Result{ExitCode: exit(0)}
	body := text
	for {
		i := strings.LastIndex(body, "\n[")
		if i < 0 || !strings.HasSuffix(body, "]") {
			break
		}
		line := body[i+1:]
		switch {
		case strings.HasPrefix(line, "[exit code: "):
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(line, "[exit code: "), "]"))
			if err != nil {
				return res
			}
			res.ExitCode = exit(n)
		case strings.HasPrefix(line, "[killed by signal: "):
			res.ExitCode, res.Signal = nil, strings.TrimSuffix(strings.TrimPrefix(line, "[killed by signal: "), "]")
		default:
			goto done
		}
		body = body[:i+1]
	}
done:
	if body == "(no output)" {
		return res
	}
	if i := strings.Index(body, "[stderr]\n"); i == 0 || (i > 0 && body[i-1] == '\n') {
		res.Stdout.Text, res.Stderr.Text = body[:i], body[i+len("[stderr]\n"):]
		return res
	}
	res.Stdout.Text = body
	return res
}
