package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// MaxRequestBytes bounds a request body.
const MaxRequestBytes = 16 << 20

// chunkRunes is how many characters of text one streamed delta carries,
// so that clients see text arrive in several pieces as from a real model.
const chunkRunes = 16

// ErrorCodeExhausted is the error code of the answer to a request that
// arrives after the script's last response was played.
const ErrorCodeExhausted = "replay_script_exhausted"

// Server plays a Script over HTTP. It answers
//
//   - POST /v1/chat/completions and /chat/completions (the base URL may
//     or may not end in /v1): the next response, streamed as server-sent
//     events when the request says "stream": true, else one JSON object;
//   - GET /v1/models and /models: the script's model.
//
// Requests that arrive after the last response get a 400 error with code
// ErrorCodeExhausted (a 4xx, so that clients do not retry). Every request
// to a chat endpoint is recorded, before it is answered, as one line of
// JSON (a Record) on the record writer. Authentication is not checked:
// any key, or none, is accepted, and header values are never recorded.
//
// Create a Server with NewServer. It is safe for concurrent use;
// concurrent requests take responses in the order they are served.
type Server struct {
	script *Script
	now    func() time.Time

	mu     sync.Mutex
	next   int // index of the next response
	seq    int // requests seen
	record io.Writer
}

// Record is one recorded request.
type Record struct {
	// Seq counts the requests to chat endpoints, from 1.
	Seq int `json:"seq"`
	// Method and Path are the request line's.
	Method string `json:"method"`
	Path   string `json:"path"`
	// HeaderNames are the request's header names, canonical and sorted;
	// values are never recorded (they hold keys).
	HeaderNames []string `json:"headerNames"`
	// Stream is the request's "stream" flag.
	Stream bool `json:"stream"`
	// Body is the request body when it is JSON; else absent.
	Body json.RawMessage `json:"body,omitempty"`
	// Response is the index of the script response that answered it, or
	// -1 when none did (see Error).
	Response int `json:"response"`
	// Error is why the request got an error instead of a response.
	Error string `json:"error,omitempty"`
}

// NewServer returns a Server that plays s from its first response and
// records requests to record (nil records nothing). s must be valid
// (Script.Validate) and must not change while the Server runs.
func NewServer(s *Script, record io.Writer) (*Server, error) {
	if s == nil {
		return nil, fmt.Errorf("replay: nil script")
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &Server{script: s, record: record, now: time.Now}, nil
}

// Played reports how many responses have been played.
func (s *Server) Played() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/chat/completions", "/chat/completions":
		if r.Method != http.MethodPost {
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" "+r.URL.Path+": only POST")
			return
		}
		s.chat(w, r)
	case "/v1/models", "/models":
		if r.Method != http.MethodGet {
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" "+r.URL.Path+": only GET")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"object": "list",
			"data":   []any{map[string]any{"id": s.modelName(""), "object": "model", "owned_by": "dsh-sandbox-replay"}},
		})
	default:
		writeError(w, http.StatusNotFound, "not_found", "no endpoint "+r.URL.Path+" (this is a replay model: /v1/chat/completions, /v1/models)")
	}
}

// chatRequest is the part of a chat request the server reads.
type chatRequest struct {
	Model         string            `json:"model"`
	Messages      []json.RawMessage `json:"messages"`
	Stream        bool              `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	rec := Record{Method: r.Method, Path: r.URL.Path, Response: -1}
	for name := range r.Header {
		rec.HeaderNames = append(rec.HeaderNames, name)
	}
	slices.Sort(rec.HeaderNames)
	var req chatRequest
	status := http.StatusBadRequest
	code := "invalid_request_error"
	switch {
	case err != nil:
		rec.Error = "reading the body: " + err.Error()
	case len(body) > MaxRequestBytes:
		rec.Error = "body: larger than " + strconv.Itoa(MaxRequestBytes) + " bytes"
		status = http.StatusRequestEntityTooLarge
	case !json.Valid(body):
		rec.Error = "body: not JSON"
	default:
		rec.Body = json.RawMessage(body)
		if err := json.Unmarshal(body, &req); err != nil {
			rec.Error = "body: " + err.Error()
		} else if len(req.Messages) == 0 {
			rec.Error = "messages: at least one message is required"
		}
	}
	rec.Stream = req.Stream

	s.mu.Lock()
	s.seq++
	rec.Seq = s.seq
	var resp Response
	if rec.Error == "" {
		if s.next < len(s.script.Responses) {
			rec.Response = s.next
			resp = s.script.Responses[s.next]
			s.next++
		} else {
			rec.Error = fmt.Sprintf("script exhausted: all %d responses were played; request %d has none", len(s.script.Responses), rec.Seq)
			code = ErrorCodeExhausted
		}
	}
	recordErr := s.writeRecord(&rec)
	s.mu.Unlock()

	if recordErr != nil {
		writeError(w, http.StatusInternalServerError, "replay_record_failed", "recording the request: "+recordErr.Error())
		return
	}
	if rec.Error != "" {
		writeError(w, status, code, "replay: "+rec.Error)
		return
	}
	id := "chatcmpl-replay-" + strconv.Itoa(rec.Seq)
	if req.Stream {
		s.stream(w, id, req, resp, rec.Seq)
		return
	}
	writeJSON(w, http.StatusOK, s.completion(id, req, resp, rec.Seq))
}

// writeRecord writes rec as one line. Called with s.mu held, so that lines
// never interleave and follow the order of Seq.
func (s *Server) writeRecord(rec *Record) error {
	if s.record == nil {
		return nil
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	_, err = s.record.Write(append(line, '\n'))
	return err
}

func (s *Server) modelName(requested string) string {
	switch {
	case s.script.Model != "":
		return s.script.Model
	case requested != "":
		return requested
	default:
		return "replay"
	}
}

// wireToolCall is a tool call as the chat API sends it.
type wireToolCall struct {
	Index    *int   `json:"index,omitempty"` // streaming deltas only
	ID       string `json:"id,omitempty"`
	Type     string `json:"type,omitempty"`
	Function struct {
		Name      string `json:"name,omitempty"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type usage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// toolCalls are resp's calls on the wire, with ids filled in.
func toolCalls(resp Response, seq int) []wireToolCall {
	out := make([]wireToolCall, 0, len(resp.ToolCalls))
	for i, tc := range resp.ToolCalls {
		w := wireToolCall{ID: tc.ID, Type: "function"}
		if w.ID == "" {
			w.ID = "call_" + strconv.Itoa(seq) + "_" + strconv.Itoa(i)
		}
		w.Function.Name = tc.Name
		w.Function.Arguments, _ = tc.argumentString() // validated by NewServer
		out = append(out, w)
	}
	return out
}

func finishReason(resp Response) string {
	switch {
	case resp.FinishReason != "":
		return resp.FinishReason
	case len(resp.ToolCalls) > 0:
		return "tool_calls"
	default:
		return "stop"
	}
}

// tokenUsage is a rough count (4 bytes a token): clients only need the
// fields to be present and plausible.
func tokenUsage(req chatRequest, resp Response) usage {
	var prompt int
	for _, m := range req.Messages {
		prompt += len(m)
	}
	completion := len(resp.Content) + len(resp.ReasoningContent)
	for _, tc := range resp.ToolCalls {
		completion += len(tc.Name) + len(tc.Arguments)
	}
	u := usage{PromptTokens: (prompt + 3) / 4, CompletionTokens: (completion + 3) / 4}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	return u
}

func (s *Server) completion(id string, req chatRequest, resp Response, seq int) map[string]any {
	msg := map[string]any{"role": "assistant", "content": resp.Content}
	if resp.Content == "" && len(resp.ToolCalls) > 0 {
		msg["content"] = nil
	}
	if resp.ReasoningContent != "" {
		msg["reasoning_content"] = resp.ReasoningContent
	}
	if len(resp.ToolCalls) > 0 {
		msg["tool_calls"] = toolCalls(resp, seq)
	}
	return map[string]any{
		"id":      id,
		"object":  "chat.completion",
		"created": s.now().Unix(),
		"model":   s.modelName(req.Model),
		"choices": []any{map[string]any{
			"index":         0,
			"message":       msg,
			"logprobs":      nil,
			"finish_reason": finishReason(resp),
		}},
		"usage": tokenUsage(req, resp),
	}
}

// stream sends resp as chat.completion.chunk events: the role, the
// reasoning and the content in pieces, each tool call's id and name and
// then its arguments in two pieces, the finish reason, the usage when the
// request asked for it, and [DONE].
func (s *Server) stream(w http.ResponseWriter, id string, req chatRequest, resp Response, seq int) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	created := s.now().Unix()
	model := s.modelName(req.Model)
	send := func(delta map[string]any, finish any, u *usage) bool {
		choices := []any{}
		if delta != nil {
			choices = append(choices, map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish})
		}
		chunk := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices}
		if u != nil {
			chunk["usage"] = u
		}
		data, err := json.Marshal(chunk)
		if err != nil {
			return false
		}
		if _, err := fmt.Fprintf(w, "data: %s\n\n", data); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	if !send(map[string]any{"role": "assistant", "content": ""}, nil, nil) {
		return
	}
	for _, piece := range pieces(resp.ReasoningContent) {
		if !send(map[string]any{"reasoning_content": piece}, nil, nil) {
			return
		}
	}
	for _, piece := range pieces(resp.Content) {
		if !send(map[string]any{"content": piece}, nil, nil) {
			return
		}
	}
	for i, tc := range toolCalls(resp, seq) {
		first := tc
		first.Index = &i
		args := tc.Function.Arguments
		half := halfway(args)
		first.Function.Arguments = args[:half]
		if !send(map[string]any{"tool_calls": []wireToolCall{first}}, nil, nil) {
			return
		}
		rest := wireToolCall{Index: &i}
		rest.Function.Arguments = args[half:]
		if !send(map[string]any{"tool_calls": []wireToolCall{rest}}, nil, nil) {
			return
		}
	}
	if !send(map[string]any{}, finishReason(resp), nil) {
		return
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		u := tokenUsage(req, resp)
		if !send(nil, nil, &u) {
			return
		}
	}
	if _, err := io.WriteString(w, "data: [DONE]\n\n"); err == nil && flusher != nil {
		flusher.Flush()
	}
}

// pieces splits text into chunks of at most chunkRunes characters,
// never inside a UTF-8 sequence.
func pieces(text string) []string {
	var out []string
	for text != "" {
		n, i := 0, 0
		for i < len(text) && n < chunkRunes {
			_, size := utf8.DecodeRuneInString(text[i:])
			i += size
			n++
		}
		out = append(out, text[:i])
		text = text[i:]
	}
	return out
}

// halfway is a byte offset near the middle of s on a rune boundary.
func halfway(s string) int {
	i := len(s) / 2
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return i
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// writeError sends an error in the chat API's shape.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code, "param": nil}})
}
