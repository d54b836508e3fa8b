package replay

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden streams in testdata/")

// goldenScript has a response with every kind of output (reasoning, text
// over several pieces, a namespaced call, a call with malformed
// arguments) and a plain one.
const goldenScript = `{
  "responses": [
    {"reasoning_content": "I should look.", "content": "Let me run it: ünïcödé <text> & more.",
     "tool_calls": [{"id": "call_a", "namespace": "mcp__dsh_sandbox", "name": "bash", "arguments": {"command": "echo \"hi\"; ls", "timeout": 5000}},
                    {"name": "bash", "arguments": "{\"command\": \"pwd\""}]},
    {"content": "done"}
  ]
}`

// wireRequests are a first request of each format.
var wireRequests = map[string]struct{ path, body string }{
	"chat":      {"/v1/chat/completions", `{"model":"m","stream":true,"messages":[{"role":"user","content":"go"}]}`},
	"responses": {"/v1/responses", `{"model":"m","stream":true,"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]}]}`},
	"messages":  {"/v1/messages?beta=true", `{"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"go"}]}`},
}

func goldenServer(t *testing.T) (*httptest.Server, *syncBuffer) {
	t.Helper()
	hs, _, rec := newTestServerAt(t, goldenScript, func() time.Time { return time.Unix(1767225600, 0) })
	return hs, rec
}

// TestGoldenStreams pins each format's event stream, byte for byte, for
// the first response streamed and the same response as one object.
func TestGoldenStreams(t *testing.T) {
	for name, req := range wireRequests {
		for _, stream := range []bool{true, false} {
			body, file := req.body, name+".sse"
			if !stream {
				body, file = strings.Replace(body, `"stream":true`, `"stream":false`, 1), name+".json"
			}
			t.Run(file, func(t *testing.T) {
				hs, _ := goldenServer(t)
				resp := post(t, hs.URL+req.path, body)
				got, err := io.ReadAll(resp.Body)
				if err != nil {
					t.Fatal(err)
				}
				wantType := "application/json"
				if stream {
					wantType = "text/event-stream"
				}
				if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != wantType {
					t.Fatalf("status %d, type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), got)
				}
				path := filepath.Join("testdata", file)
				if *update {
					if err := os.WriteFile(path, got, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				want, err := os.ReadFile(path)
				if err != nil {
					t.Fatalf("%v (go test ./replay -run TestGoldenStreams -update writes it)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from %s:\n%s", file, path, got)
				}
			})
		}
	}
}

// sseEvent is one event of a stream: its name and its data.
type sseEvent struct {
	name string
	data map[string]any
}

// readEvents parses a stream of "event:"/"data:" pairs, checking that
// every data's type equals its event name.
func readEvents(t *testing.T, r io.Reader) []sseEvent {
	t.Helper()
	raw, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	var out []sseEvent
	for _, block := range strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(block, "\n")
		name, ok1 := strings.CutPrefix(name, "event: ")
		data, ok2 := strings.CutPrefix(data, "data: ")
		if !ok || !ok1 || !ok2 {
			t.Fatalf("event block %q is not an event and a data line", block)
		}
		var ev sseEvent
		ev.name = name
		if err := json.Unmarshal([]byte(data), &ev.data); err != nil {
			t.Fatalf("event %s data %q: %v", name, data, err)
		}
		if ev.data["type"] != name {
			t.Errorf("event %s has type %v", name, ev.data["type"])
		}
		out = append(out, ev)
	}
	return out
}

// firstStream sends the first request of format api and checks that the
// stream runs from the event first to the event last.
func firstStream(t *testing.T, hs *httptest.Server, api, first, last string) []sseEvent {
	t.Helper()
	req := wireRequests[api]
	events := readEvents(t, post(t, hs.URL+req.path, req.body).Body)
	if events[0].name != first || events[len(events)-1].name != last {
		t.Fatalf("stream runs %s … %s, want %s … %s", events[0].name, events[len(events)-1].name, first, last)
	}
	return events
}

// TestResponsesStreamAssembles reads the Responses stream as Codex does:
// the items of output_item.done, the text deltas, the argument deltas,
// the final response.completed, with sequence numbers counting from 0.
func TestResponsesStreamAssembles(t *testing.T) {
	hs, rec := goldenServer(t)
	events := firstStream(t, hs, "responses", "response.created", "response.completed")
	var text, args strings.Builder
	var done []map[string]any
	for i, ev := range events {
		if n, _ := ev.data["sequence_number"].(float64); int(n) != i {
			t.Errorf("event %d (%s) has sequence_number %v", i, ev.name, ev.data["sequence_number"])
		}
		switch ev.name {
		case "response.output_text.delta":
			text.WriteString(ev.data["delta"].(string))
		case "response.function_call_arguments.delta":
			if ev.data["item_id"] == "fc_replay_1_0" {
				args.WriteString(ev.data["delta"].(string))
			}
		case "response.output_item.done":
			done = append(done, ev.data["item"].(map[string]any))
		}
	}
	if text.String() != "Let me run it: ünïcödé <text> & more." {
		t.Errorf("text deltas = %q", text.String())
	}
	if args.String() != `{"command":"echo \"hi\"; ls","timeout":5000}` {
		t.Errorf("argument deltas = %q", args.String())
	}
	if len(done) != 4 {
		t.Fatalf("%d items done, want reasoning, message and two calls", len(done))
	}
	types := []string{"reasoning", "message", "function_call", "function_call"}
	for i, it := range done {
		if it["type"] != types[i] {
			t.Errorf("item %d type %v, want %s", i, it["type"], types[i])
		}
	}
	if c := done[2]; c["call_id"] != "call_a" || c["namespace"] != "mcp__dsh_sandbox" || c["name"] != "bash" {
		t.Errorf("first call = %v, want call_a, namespace mcp__dsh_sandbox, name bash", c)
	}
	if c := done[3]; c["call_id"] != "call_1_1" || c["arguments"] != `{"command": "pwd"` || c["namespace"] != nil {
		t.Errorf("second call = %v, want call_1_1 with the malformed arguments as they are and no namespace", c)
	}
	completed := events[len(events)-1].data["response"].(map[string]any)
	if completed["status"] != "completed" || len(completed["output"].([]any)) != 4 || completed["usage"] == nil {
		t.Errorf("response.completed = %v, want status completed with the 4 items and usage", completed)
	}

	// The call's result arrives in the next request, which gets the next
	// response; the record holds it.
	next := `{"model":"m","stream":true,"input":[{"type":"function_call_output","call_id":"call_a","output":"hi"}]}`
	events = readEvents(t, post(t, hs.URL+"/responses", next).Body)
	last := events[len(events)-1].data["response"].(map[string]any)
	if out := last["output"].([]any); len(out) != 1 || out[0].(map[string]any)["type"] != "message" {
		t.Errorf("second response output = %v, want one message", out)
	}
	recs := rec.records(t)
	if len(recs) != 2 || recs[1].Path != "/responses" || !strings.Contains(string(recs[1].Body), `"call_id":"call_a"`) || recs[1].Response != 1 || !recs[1].Stream {
		t.Errorf("records = %+v, want the second request with the call's output, answered by response 1", recs)
	}
}

// TestMessagesStreamAssembles reads the Messages stream as Claude Code
// does: blocks by index, their deltas, the stop reason.
func TestMessagesStreamAssembles(t *testing.T) {
	hs, rec := goldenServer(t)
	events := firstStream(t, hs, "messages", "message_start", "message_stop")
	type block struct {
		typ, id, name, text, json, signature string
	}
	var blocks []*block
	var stop any
	for _, ev := range events {
		switch ev.name {
		case "content_block_start":
			cb := ev.data["content_block"].(map[string]any)
			if int(ev.data["index"].(float64)) != len(blocks) {
				t.Fatalf("block index %v, want %d", ev.data["index"], len(blocks))
			}
			b := &block{typ: cb["type"].(string)}
			b.id, _ = cb["id"].(string)
			b.name, _ = cb["name"].(string)
			blocks = append(blocks, b)
		case "content_block_delta":
			b := blocks[int(ev.data["index"].(float64))]
			d := ev.data["delta"].(map[string]any)
			switch d["type"] {
			case "text_delta":
				b.text += d["text"].(string)
			case "thinking_delta":
				b.text += d["thinking"].(string)
			case "signature_delta":
				b.signature += d["signature"].(string)
			case "input_json_delta":
				b.json += d["partial_json"].(string)
			default:
				t.Errorf("delta type %v", d["type"])
			}
		case "message_delta":
			stop = ev.data["delta"].(map[string]any)["stop_reason"]
		}
	}
	want := []block{
		{typ: "thinking", text: "I should look.", signature: thinkingSignature},
		{typ: "text", text: "Let me run it: ünïcödé <text> & more."},
		{typ: "tool_use", id: "call_a", name: "bash", json: `{"command":"echo \"hi\"; ls","timeout":5000}`},
		{typ: "tool_use", id: "toolu_replay_1_1", name: "bash", json: `{"command": "pwd"`},
	}
	if len(blocks) != len(want) {
		t.Fatalf("%d blocks, want %d", len(blocks), len(want))
	}
	for i := range want {
		if *blocks[i] != want[i] {
			t.Errorf("block %d = %+v, want %+v", i, *blocks[i], want[i])
		}
	}
	if stop != "tool_use" {
		t.Errorf("stop_reason = %v, want tool_use", stop)
	}

	next := `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_a","content":"hi"}]}]}`
	var msg struct {
		Content []struct {
			Type, Text string
		} `json:"content"`
		StopReason string `json:"stop_reason"`
	}
	if err := json.NewDecoder(post(t, hs.URL+"/v1/messages", next).Body).Decode(&msg); err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != "done" || msg.StopReason != "end_turn" {
		t.Errorf("second message = %+v, want the text done, end_turn", msg)
	}
	recs := rec.records(t)
	if len(recs) != 2 || recs[0].Query != "beta=true" || !strings.Contains(string(recs[1].Body), `"tool_use_id":"call_a"`) || recs[1].Stream {
		t.Errorf("records = %+v, want the beta query and the tool result recorded", recs)
	}
}

// TestWireErrors checks each format's refusals: bad bodies name the
// field, an exhausted script is a 400 in the format's error shape.
func TestWireErrors(t *testing.T) {
	hs, _, rec := newTestServer(t, `{"responses":[{"content":"only"}]}`)
	for _, tc := range []struct{ path, body, want string }{
		{"/v1/responses", `{"model":"m"}`, "input: required"},
		{"/v1/responses", `{"input":[]}`, "input: at least one item"},
		{"/v1/responses", `{"input":5}`, "input: must be a string or a list"},
		{"/v1/messages", `{"max_tokens":1,"messages":[{"role":"user","content":"x"}]}`, "model: required"},
		{"/v1/messages", `{"model":"m","messages":[{"role":"user","content":"x"}]}`, "max_tokens: required"},
		{"/v1/messages", `{"model":"m","max_tokens":1,"messages":[]}`, "messages: at least one"},
		{"/v1/messages", `not json`, "body: not JSON"},
	} {
		resp := post(t, hs.URL+tc.path, tc.body)
		data, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), tc.want) {
			t.Errorf("POST %s %s: %d %s, want 400 naming %q", tc.path, tc.body, resp.StatusCode, data, tc.want)
		}
	}
	// The legitimate variant plays the response; then the script is spent.
	if resp := post(t, hs.URL+"/v1/responses", `{"model":"m","input":"go"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("a good Responses request: %d", resp.StatusCode)
	}
	resp := post(t, hs.URL+"/v1/messages", `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`)
	var e struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusBadRequest || e.Type != "error" || e.Error.Type != "invalid_request_error" || !strings.Contains(e.Error.Message, ErrorCodeExhausted) {
		t.Errorf("exhausted Messages request: %d %+v, want 400 in the Messages error shape naming %s", resp.StatusCode, e, ErrorCodeExhausted)
	}
	resp = post(t, hs.URL+"/v1/responses", `{"model":"m","input":"go"}`)
	if data, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), `"code":"`+ErrorCodeExhausted+`"`) {
		t.Errorf("exhausted Responses request: %d %s", resp.StatusCode, data)
	}
	if n := len(rec.records(t)); n != 10 {
		t.Errorf("%d records, want 10 (every request)", n)
	}
}

// TestRecordsOtherAddresses: pointed at as a proxy, the server records
// the address a client tried and refuses it; an unknown path is
// recorded too.
func TestRecordsOtherAddresses(t *testing.T) {
	hs, srv, rec := newTestServer(t, `{"responses":[{"content":"only"}]}`)
	proxied := &http.Client{Transport: &http.Transport{Proxy: func(*http.Request) (*url.URL, error) { return url.Parse(hs.URL) }}}
	if resp := get(t, proxied, "http://telemetry.example:80/v1/track"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("proxied GET: %d, want 404", resp.StatusCode)
	}
	get(t, http.DefaultClient, hs.URL+"/api/event_logging/batch")
	recs := rec.records(t)
	if len(recs) != 2 || recs[0].Host != "telemetry.example:80" || recs[0].Error != "not a proxy" || recs[1].Path != "/api/event_logging/batch" || recs[1].Host != "" {
		t.Errorf("records = %+v, want the proxied host and the unknown path", recs)
	}
	if srv.Played() != 0 {
		t.Errorf("Played() = %d, want 0", srv.Played())
	}
}

// TestCapture: a call's argument is filled from the request it answers,
// with the last match; without a match the request is refused and the
// response stays unplayed.
func TestCapture(t *testing.T) {
	hs, srv, rec := newTestServer(t, `{"responses":[
	  {"tool_calls":[{"id":"c1","name":"job_output","arguments":{"other":1},"capture":{"job_id":"bash-[0-9a-f]{4}"}}]},
	  {"content":"done"}]}`)
	resp := post(t, hs.URL+"/v1/chat/completions", `{"messages":[{"role":"user","content":"no job here"}]}`)
	if data, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(data), "capture.job_id: no match") {
		t.Errorf("request without a match: %d %s, want 400 naming capture.job_id", resp.StatusCode, data)
	}
	if srv.Played() != 0 {
		t.Fatalf("Played() = %d after a refused capture, want 0", srv.Played())
	}
	resp = post(t, hs.URL+"/v1/chat/completions", `{"messages":[{"role":"tool","content":"bash-00aa"},{"role":"tool","content":"job bash-12ef started"}]}`)
	var c completion
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		t.Fatal(err)
	}
	if len(c.Choices) != 1 || len(c.Choices[0].Message.ToolCalls) != 1 || c.Choices[0].Message.ToolCalls[0].Function.Arguments != `{"job_id":"bash-12ef","other":1}` {
		t.Errorf("completion = %+v, want job_id bash-12ef (the last match) next to the scripted argument", c)
	}
	if recs := rec.records(t); len(recs) != 2 || recs[1].Response != 0 {
		t.Errorf("records = %+v", recs)
	}
	for _, bad := range []string{
		`{"responses":[{"tool_calls":[{"name":"x","arguments":"[1]","capture":{"a":"b"}}]}]}`,
		`{"responses":[{"tool_calls":[{"name":"x","capture":{"a":"("}}]}]}`,
	} {
		if _, err := ParseScript([]byte(bad)); err == nil {
			t.Errorf("ParseScript(%s): no error", bad)
		}
	}
}

// FuzzServe sends arbitrary bodies to every endpoint: the server answers
// 200 or a 4xx, never panics, and a refused request plays nothing.
func FuzzServe(f *testing.F) {
	for _, r := range wireRequests {
		f.Add(r.path, r.body)
	}
	f.Add("/v1/responses", `{"input":"x","stream":true}`)
	f.Add("/v1/messages", `{"model":"m","max_tokens":1,"messages":[{}]}`)
	script, err := ParseScript([]byte(goldenScript))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, path, body string) {
		if !strings.HasPrefix(path, "/") {
			return
		}
		srv, err := NewServer(script, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodPost, "http://replay/", strings.NewReader(body))
		req.URL.Path = path
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, req)
		switch {
		case w.Code == http.StatusOK:
			if srv.Played() != 1 {
				t.Errorf("200 for %s %q but %d responses played", path, body, srv.Played())
			}
		case w.Code >= 400 && w.Code < 500:
			if srv.Played() != 0 {
				t.Errorf("%d for %s %q but a response was played", w.Code, path, body)
			}
		default:
			t.Errorf("status %d for %s %q", w.Code, path, body)
		}
	})
}
