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

// Server plays a Script over HTTP, in the wire format of three APIs:
//
//   - OpenAI/DeepSeek chat completions: POST /v1/chat/completions (and
//     /chat/completions: the base URL may or may not end in /v1);
//   - the OpenAI Responses API: POST /v1/responses (and /responses), the
//     API Codex speaks; a tool call's result arrives as a
//     function_call_output item of the next request;
//   - the Anthropic Messages API: POST /v1/messages (also with
//     ?beta=true, as Claude Code sends it), tool calls as tool_use
//     blocks, their results as tool_result blocks of the next request;
//
// each answering with the next response of the one script, streamed as
// server-sent events when the request says "stream": true, else as one
// JSON object. GET /v1/models and /models list the script's model.
//
// Requests that arrive after the last response get a 400 error with code
// ErrorCodeExhausted (a 4xx, so that clients do not retry), in the API's
// error shape. Every request to a model endpoint is recorded, before it is
// answered, as one line of JSON (a Record) on the record writer, and so
// is every request to an unknown path or for a proxy (CONNECT host:443):
// pointed at as a client's HTTP proxy, the server records what else the
// client tried to reach and refuses it.
// Authentication is not checked: any key, or none, is accepted, and header
// values are never recorded.
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

// Record is one recorded request: every request but GET /v1/models is
// recorded, those to no endpoint too.
type Record struct {
	// Seq counts the recorded requests, from 1.
	Seq int `json:"seq"`
	// Method and Path are the request line's; Query is its query string
	// (Claude Code sends "beta=true"), absent when empty.
	Method string `json:"method"`
	Path   string `json:"path"`
	Query  string `json:"query,omitempty"`
	// Host is the target of a proxy request (CONNECT host:port, or an
	// absolute URL): a client that used the server as its proxy.
	Host string `json:"host,omitempty"`
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

// Endpoints names the paths a Server answers, for help texts and errors.
const Endpoints = "POST /v1/chat/completions, POST /v1/responses, POST /v1/messages, GET /v1/models"

// api is one wire format: how its requests are checked and its responses
// and errors written.
type api interface {
	// parse checks a request body and returns what the answer depends
	// on, or an error naming the field.
	parse(body []byte) (request, error)
	// respond writes resp, the answer to request seq.
	respond(w http.ResponseWriter, t turn)
	// fail writes an error in the API's shape.
	fail(w http.ResponseWriter, status int, code, msg string)
}

// request is what an answer depends on of a request.
type request struct {
	model        string
	stream       bool
	includeUsage bool // chat: stream_options.include_usage
}

// turn is what a response writer needs: the scripted response and the
// request's facts.
type turn struct {
	resp    Response
	seq     int
	model   string // the model name to report
	req     request
	created int64
	prompt  int // request body bytes, for the token estimate
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var a api
	switch r.URL.Path {
	case "/v1/chat/completions", "/chat/completions":
		a = chatAPI{}
	case "/v1/responses", "/responses":
		a = responsesAPI{}
	case "/v1/messages", "/messages":
		a = messagesAPI{}
	case "/v1/models", "/models":
		if r.Method != http.MethodGet {
			writeError(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" "+r.URL.Path+": only GET")
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{
			"object": "list",
			"data":   []any{map[string]any{"id": s.modelName(""), "object": "model", "owned_by": "dsh-sandbox-replay"}},
		})
		return
	default:
		// Recorded too: a client that asks for anything else, or uses
		// the server as its proxy (CONNECT host:443, GET http://host/),
		// tried to reach something a test should know about.
		rec := Record{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Response: -1, Error: "no endpoint"}
		if r.Method == http.MethodConnect || r.URL.Host != "" {
			rec.Host = r.Host
			rec.Error = "not a proxy"
		}
		rec.HeaderNames = headerNames(r)
		s.mu.Lock()
		s.seq++
		rec.Seq = s.seq
		err := s.writeRecord(&rec)
		s.mu.Unlock()
		if err != nil {
			writeError(w, http.StatusInternalServerError, "replay_record_failed", "recording the request: "+err.Error())
			return
		}
		writeError(w, http.StatusNotFound, "not_found", "no endpoint "+r.Method+" "+r.Host+r.URL.Path+" (this is a replay model: "+Endpoints+")")
		return
	}
	if r.Method != http.MethodPost {
		a.fail(w, http.StatusMethodNotAllowed, "method_not_allowed", r.Method+" "+r.URL.Path+": only POST")
		return
	}
	s.serve(w, r, a)
}

// serve records the request, takes the next response and has a write it.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, a api) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxRequestBytes+1))
	rec := Record{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Response: -1, HeaderNames: headerNames(r)}
	var req request
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
		var perr error
		if req, perr = a.parse(body); perr != nil {
			rec.Error = perr.Error()
		}
		rec.Stream = req.stream
	}

	s.mu.Lock()
	s.seq++
	rec.Seq = s.seq
	var resp Response
	if rec.Error == "" {
		if s.next < len(s.script.Responses) {
			var err error
			if resp, err = captured(s.script.Responses[s.next], body); err != nil {
				rec.Error = "responses[" + strconv.Itoa(s.next) + "]." + err.Error()
			} else {
				rec.Response = s.next
				s.next++
			}
		} else {
			rec.Error = fmt.Sprintf("script exhausted: all %d responses were played; request %d has none", len(s.script.Responses), rec.Seq)
			code = ErrorCodeExhausted
		}
	}
	recordErr := s.writeRecord(&rec)
	s.mu.Unlock()

	if recordErr != nil {
		a.fail(w, http.StatusInternalServerError, "replay_record_failed", "recording the request: "+recordErr.Error())
		return
	}
	if rec.Error != "" {
		a.fail(w, status, code, "replay: "+rec.Error)
		return
	}
	a.respond(w, turn{resp: resp, seq: rec.Seq, model: s.modelName(req.model), req: req, created: s.now().Unix(), prompt: len(body)})
}

// headerNames are r's header names, sorted.
func headerNames(r *http.Request) []string {
	var names []string
	for name := range r.Header {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
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

// events writes server-sent events, flushing each.
type events struct {
	w       http.ResponseWriter
	flusher http.Flusher
}

// startEvents sends the headers of an event stream.
func startEvents(w http.ResponseWriter) events {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	f, _ := w.(http.Flusher)
	return events{w: w, flusher: f}
}

// send writes v as one event's JSON data, preceded by an "event:" line
// when name is not empty; false when the client is gone.
func (e events) send(name string, v any) bool {
	var b bytes.Buffer
	if name != "" {
		b.WriteString("event: " + name + "\n")
	}
	b.WriteString("data: ")
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode ends the line
		return false
	}
	b.WriteString("\n")
	if _, err := e.w.Write(b.Bytes()); err != nil {
		return false
	}
	if e.flusher != nil {
		e.flusher.Flush()
	}
	return true
}

// done ends a chat stream with its [DONE] sentinel.
func (e events) done() {
	if _, err := io.WriteString(e.w, "data: [DONE]\n\n"); err == nil && e.flusher != nil {
		e.flusher.Flush()
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
