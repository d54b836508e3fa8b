package replay

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

const testScript = `{
  "responses": [
    {"reasoning_content": "I should look.", "content": "Let me run it: ünïcödé text that spans chunks.",
     "tool_calls": [{"id": "call_a", "name": "bash", "arguments": {"command": "echo \"hi\"; ls", "timeout": 5000}},
                    {"name": "bash", "arguments": "{\"command\": \"pwd\""}]},
    {"content": "done"}
  ]
}`

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) records(t *testing.T) []Record {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Record
	for _, line := range strings.Split(strings.TrimSuffix(s.b.String(), "\n"), "\n") {
		if line == "" {
			continue
		}
		var r Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("record line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

func newTestServer(t *testing.T, script string) (*httptest.Server, *Server, *syncBuffer) {
	t.Helper()
	return newTestServerAt(t, script, nil)
}

// newTestServerAt is newTestServer with a clock (nil: the real one).
func newTestServerAt(t *testing.T, script string, now func() time.Time) (*httptest.Server, *Server, *syncBuffer) {
	t.Helper()
	s, err := ParseScript([]byte(script))
	if err != nil {
		t.Fatal(err)
	}
	rec := &syncBuffer{}
	srv, err := NewServer(s, rec)
	if err != nil {
		t.Fatal(err)
	}
	if now != nil {
		srv.now = now
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	return hs, srv, rec
}

func post(t *testing.T, url string, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-secret-value")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// get sends a GET with client; the body is closed at cleanup.
func get(t *testing.T, client *http.Client, url string) *http.Response {
	t.Helper()
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role             string         `json:"role"`
			Content          *string        `json:"content"`
			ReasoningContent string         `json:"reasoning_content"`
			ToolCalls        []wireToolCall `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage *usage `json:"usage"`
}

func TestNonStreamingToolCalls(t *testing.T) {
	hs, srv, rec := newTestServer(t, testScript)
	resp := post(t, hs.URL+"/v1/chat/completions", `{"model":"deepseek-chat","messages":[{"role":"user","content":"go"}]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status = %d, want 200", resp.StatusCode)
	}
	var c completion
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	if c.Object != "chat.completion" || c.Model != "deepseek-chat" || len(c.Choices) != 1 || c.Usage == nil {
		t.Fatalf("completion = %+v, want one choice of model deepseek-chat with usage", c)
	}
	m := c.Choices[0].Message
	if m.Role != "assistant" || m.Content == nil || !strings.HasPrefix(*m.Content, "Let me run it") || m.ReasoningContent != "I should look." {
		t.Errorf("message = %+v, want the scripted text and reasoning", m)
	}
	if c.Choices[0].FinishReason != "tool_calls" {
		t.Errorf("finish_reason = %q, want tool_calls", c.Choices[0].FinishReason)
	}
	if len(m.ToolCalls) != 2 {
		t.Fatalf("tool_calls = %+v, want 2", m.ToolCalls)
	}
	tc := m.ToolCalls[0]
	if tc.ID != "call_a" || tc.Type != "function" || tc.Function.Name != "bash" || tc.Function.Arguments != `{"command":"echo \"hi\"; ls","timeout":5000}` {
		t.Errorf("tool_calls[0] = %+v, want call_a bash with compacted arguments", tc)
	}
	if tc := m.ToolCalls[1]; tc.ID != "call_1_1" || tc.Function.Arguments != `{"command": "pwd"` {
		t.Errorf("tool_calls[1] = %+v, want generated id call_1_1 and the raw (malformed) string arguments", tc)
	}
	if srv.Played() != 1 {
		t.Errorf("Played() = %d, want 1", srv.Played())
	}

	// The second request gets the second response, without tool calls.
	resp = post(t, hs.URL+"/chat/completions", `{"messages":[{"role":"tool","tool_call_id":"call_a","content":"hi"}]}`)
	var c2 completion
	if err := json.NewDecoder(resp.Body).Decode(&c2); err != nil {
		t.Fatal(err)
	}
	if got := c2.Choices[0]; got.FinishReason != "stop" || got.Message.Content == nil || *got.Message.Content != "done" || len(got.Message.ToolCalls) != 0 || c2.Model != "replay" {
		t.Errorf("second completion = %+v, want plain \"done\", finish stop, model replay", c2)
	}

	recs := rec.records(t)
	if len(recs) != 2 {
		t.Fatalf("records = %+v, want 2", recs)
	}
	if recs[0].Seq != 1 || recs[0].Path != "/v1/chat/completions" || recs[0].Response != 0 || recs[0].Stream {
		t.Errorf("record[0] = %+v", recs[0])
	}
	if !strings.Contains(string(recs[1].Body), `"tool_call_id":"call_a"`) || recs[1].Response != 1 {
		t.Errorf("record[1] = %+v, want the tool result body and response 1", recs[1])
	}
	for _, r := range recs {
		line, _ := json.Marshal(r)
		if strings.Contains(string(line), "sk-secret-value") {
			t.Errorf("record %s holds the Authorization value", line)
		}
	}
	if !strings.Contains(strings.Join(recs[0].HeaderNames, ","), "Authorization") {
		t.Errorf("header names %v, want Authorization listed (name only)", recs[0].HeaderNames)
	}
}

// readSSE returns the data payloads of an event stream, [DONE] included.
func readSSE(t *testing.T, r io.Reader) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		data, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("stream line %q is not a data line", line)
		}
		out = append(out, data)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestStreamingToolCalls(t *testing.T) {
	hs, _, rec := newTestServer(t, testScript)
	resp := post(t, hs.URL+"/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"go"}]}`)
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != "text/event-stream" {
		t.Fatalf("status %d, content type %q; want 200 text/event-stream", resp.StatusCode, ct)
	}
	events := readSSE(t, resp.Body)
	if len(events) == 0 || events[len(events)-1] != "[DONE]" {
		t.Fatalf("events = %q, want a stream ending in [DONE]", events)
	}
	var content, reasoning, finish strings.Builder
	type call struct{ id, name, args string }
	calls := map[int]*call{}
	contentPieces, sawUsage := 0, false
	for _, ev := range events[:len(events)-1] {
		var chunk struct {
			Object  string `json:"object"`
			Choices []struct {
				Delta struct {
					Content          string         `json:"content"`
					ReasoningContent string         `json:"reasoning_content"`
					ToolCalls        []wireToolCall `json:"tool_calls"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *usage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(ev), &chunk); err != nil {
			t.Fatalf("event %q: %v", ev, err)
		}
		if chunk.Object != "chat.completion.chunk" {
			t.Errorf("object = %q, want chat.completion.chunk", chunk.Object)
		}
		if chunk.Usage != nil {
			sawUsage = true
		}
		for _, ch := range chunk.Choices {
			if ch.Delta.Content != "" {
				contentPieces++
			}
			content.WriteString(ch.Delta.Content)
			reasoning.WriteString(ch.Delta.ReasoningContent)
			if ch.FinishReason != nil {
				finish.WriteString(*ch.FinishReason)
			}
			for _, tc := range ch.Delta.ToolCalls {
				if tc.Index == nil {
					t.Fatalf("tool call delta %+v has no index", tc)
				}
				c := calls[*tc.Index]
				if c == nil {
					c = &call{}
					calls[*tc.Index] = c
				}
				c.id += tc.ID
				c.name += tc.Function.Name
				c.args += tc.Function.Arguments
			}
		}
	}
	if got := content.String(); got != "Let me run it: ünïcödé text that spans chunks." || contentPieces < 2 {
		t.Errorf("content = %q in %d pieces, want the scripted text in several pieces", got, contentPieces)
	}
	if reasoning.String() != "I should look." {
		t.Errorf("reasoning = %q", reasoning.String())
	}
	if finish.String() != "tool_calls" {
		t.Errorf("finish reasons = %q, want exactly one tool_calls", finish.String())
	}
	if !sawUsage {
		t.Error("no usage chunk although stream_options.include_usage was set")
	}
	want := map[int]call{0: {"call_a", "bash", `{"command":"echo \"hi\"; ls","timeout":5000}`}, 1: {"call_1_1", "bash", `{"command": "pwd"`}}
	for i, w := range want {
		if c := calls[i]; c == nil || *c != w {
			t.Errorf("assembled tool call %d = %+v, want %+v", i, c, w)
		}
	}
	if recs := rec.records(t); len(recs) != 1 || !recs[0].Stream {
		t.Errorf("records = %+v, want one streamed request", recs)
	}
}

func TestScriptExhausted(t *testing.T) {
	hs, _, rec := newTestServer(t, `{"responses":[{"content":"only"}]}`)
	body := `{"messages":[{"role":"user","content":"x"}]}`
	if resp := post(t, hs.URL+"/v1/chat/completions", body); resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: status %d, want 200", resp.StatusCode)
	}
	for _, stream := range []bool{false, true} {
		b := body
		if stream {
			b = `{"stream":true,"messages":[{"role":"user","content":"x"}]}`
		}
		resp := post(t, hs.URL+"/v1/chat/completions", b)
		var e struct {
			Error struct {
				Message string `json:"message"`
				Code    string `json:"code"`
			} `json:"error"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusBadRequest || e.Error.Code != ErrorCodeExhausted || !strings.Contains(e.Error.Message, "all 1 responses were played") {
			t.Errorf("stream=%v: status %d, error %+v; want 400 %s naming the count", stream, resp.StatusCode, e.Error, ErrorCodeExhausted)
		}
	}
	recs := rec.records(t)
	if len(recs) != 3 || recs[1].Response != -1 || !strings.Contains(recs[1].Error, "script exhausted") {
		t.Errorf("records = %+v, want the exhausted requests recorded with their error", recs)
	}
}

func TestBadRequests(t *testing.T) {
	hs, srv, rec := newTestServer(t, `{"responses":[{"content":"only"}]}`)
	for _, tc := range []struct {
		body, want string
	}{
		{`not json`, "body: not JSON"},
		{`{"messages":[]}`, "messages: at least one message"},
		{`{"messages":"x"}`, "body: "},
	} {
		resp := post(t, hs.URL+"/v1/chat/completions", tc.body)
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), tc.want) {
			t.Errorf("POST %q: %d %s, want 400 containing %q", tc.body, resp.StatusCode, data, tc.want)
		}
	}
	if srv.Played() != 0 {
		t.Errorf("bad requests consumed %d responses, want 0", srv.Played())
	}
	if n := len(rec.records(t)); n != 3 {
		t.Errorf("%d records, want 3 (bad requests are recorded too)", n)
	}
	// The legitimate request still gets the first response.
	if resp := post(t, hs.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`); resp.StatusCode != http.StatusOK {
		t.Errorf("good request after bad ones: status %d, want 200", resp.StatusCode)
	}
	if resp := get(t, http.DefaultClient, hs.URL+"/v1/chat/completions"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET chat: %d, want 405", resp.StatusCode)
	}
	resp := get(t, http.DefaultClient, hs.URL+"/v1/models")
	if data, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || !strings.Contains(string(data), `"id":"replay"`) {
		t.Errorf("GET /v1/models: %d %s, want the model list", resp.StatusCode, data)
	}
}

func TestParseScriptErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{`{"responses":[]}`, "responses: at least one"},
		{`{"responses":[{}]}`, "responses[0]: needs content"},
		{`{"responses":[{"tool_calls":[{"arguments":{}}]}]}`, "responses[0].tool_calls[0].name: required"},
		{`{"responses":[{"tool_calls":[{"name":"bash","arguments":[1]}]}]}`, "responses[0].tool_calls[0].arguments"},
		{`{"responses":[{"content":"x","tools":[]}]}`, `unknown field "tools"`},
		{`{"responses":[{"content":"x"}]} {}`, "data after"},
	} {
		_, err := ParseScript([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseScript(%q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
	if _, err := ParseScript([]byte(`{"responses":[{"tool_calls":[{"name":"bash"}]}]}`)); err != nil {
		t.Errorf("a tool call without arguments: %v, want valid", err)
	}
}

func TestPieces(t *testing.T) {
	for _, in := range []string{"", "short", strings.Repeat("ü", 40), "ascii and ünïcödé mixed over the chunk size"} {
		ps := pieces(in)
		if strings.Join(ps, "") != in {
			t.Errorf("pieces(%q) = %q, do not join back", in, ps)
		}
		for _, p := range ps {
			if !utf8.ValidString(p) {
				t.Errorf("pieces(%q) has a piece %q that is not valid text", in, p)
			}
		}
	}
	if h := halfway("üüü"); h != 2 {
		t.Errorf("halfway(%q) = %d, want 2 (not inside the second ü)", "üüü", h)
	}
}
