// Package replay is a scripted stand-in for a model API: an http.Handler
// that answers each request with the next response of a script (text,
// reasoning, tool calls) in the wire format of the endpoint asked (OpenAI
// and DeepSeek chat completions, the OpenAI Responses API, the Anthropic
// Messages API), streaming as server-sent events or as one JSON object,
// and records every request it receives as a JSON line. Harnesses such as
// dsh, Codex and Claude Code run keyless against it in tests by pointing
// their base URL at it.
//
// It imports only the standard library; the `dsh-sandbox replay-model`
// command serves it on loopback. Any package may import it.
package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strconv"
)

// MaxScriptBytes bounds a script file.
const MaxScriptBytes = 16 << 20

// Script is a scripted conversation: the model's responses in the order
// requests arrive. The zero value has no responses and is not valid.
type Script struct {
	// Model is the model name the responses report; empty means the
	// model named by each request ("replay" when the request names none).
	Model string `json:"model,omitempty"`
	// Responses are played one per request, in order.
	Responses []Response `json:"responses"`
}

// Response is one assistant message.
type Response struct {
	// Content is the assistant's text; empty with tool calls means none.
	Content string `json:"content,omitempty"`
	// ReasoningContent is DeepSeek's reasoning text, sent before Content;
	// empty means none (the field is then left out).
	ReasoningContent string `json:"reasoning_content,omitempty"`
	// ToolCalls are the function calls the model makes.
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// FinishReason overrides the finish reason; empty means "tool_calls"
	// when there are tool calls, else "stop".
	FinishReason string `json:"finish_reason,omitempty"`
}

// ToolCall is one function call of a response.
type ToolCall struct {
	// ID is the call id; empty means "call_<request>_<index>".
	ID string `json:"id,omitempty"`
	// Name is the function's name; required.
	Name string `json:"name"`
	// Namespace is the Responses API's tool namespace (Codex offers an
	// MCP server's tools as a namespace: "mcp__dsh_sandbox" holds
	// "bash"); empty means none. The other formats have no namespaces
	// and leave it out.
	Namespace string `json:"namespace,omitempty"`
	// Arguments are the call's arguments: a JSON object (sent compacted
	// as the arguments string) or a JSON string (sent as it is, which
	// lets a script send malformed arguments on purpose). Absent means
	// "{}".
	Arguments json.RawMessage `json:"arguments,omitempty"`
	// Capture fills arguments from the request this response answers:
	// each key is an argument name, each value a regular expression, and
	// the argument is set to the expression's last match in the request
	// body (the text of a previous tool result is there), so that a
	// script can pass on what it cannot know in advance, such as a
	// background job's id: {"job_id": "bash-[0-9a-f]{16}"}. Arguments
	// must then be an object; a request without a match gets a 400
	// error naming the argument.
	Capture map[string]string `json:"capture,omitempty"`
}

// ParseScript decodes and validates a script. Unknown fields are errors,
// so a misspelt key does not silently change a test.
func ParseScript(data []byte) (*Script, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s Script
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("replay script: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("replay script: data after the top-level object")
	}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Validate checks that every response says something and that every tool
// call has a name and well-formed arguments. Errors name the field.
func (s *Script) Validate() error {
	if len(s.Responses) == 0 {
		return fmt.Errorf("replay script: responses: at least one response is required")
	}
	for i, r := range s.Responses {
		if r.Content == "" && r.ReasoningContent == "" && len(r.ToolCalls) == 0 {
			return fmt.Errorf("replay script: responses[%d]: needs content, reasoning_content or tool_calls", i)
		}
		for j, tc := range r.ToolCalls {
			if tc.Name == "" {
				return fmt.Errorf("replay script: responses[%d].tool_calls[%d].name: required", i, j)
			}
			args, err := tc.argumentString()
			if err != nil {
				return fmt.Errorf("replay script: responses[%d].tool_calls[%d].arguments: %v", i, j, err)
			}
			if len(tc.Capture) > 0 && (!json.Valid([]byte(args)) || args[0] != '{') {
				return fmt.Errorf("replay script: responses[%d].tool_calls[%d].arguments: must be an object with capture", i, j)
			}
			for name, expr := range tc.Capture {
				if _, err := regexp.Compile(expr); err != nil || name == "" {
					return fmt.Errorf("replay script: responses[%d].tool_calls[%d].capture.%s: %q is not a regular expression for an argument name", i, j, name, expr)
				}
			}
		}
	}
	return nil
}

// argumentString is the arguments as the wire's JSON-encoded string.
func (tc ToolCall) argumentString() (string, error) {
	raw := bytes.TrimSpace(tc.Arguments)
	if len(raw) == 0 {
		return "{}", nil
	}
	switch raw[0] {
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	case '{':
		var b bytes.Buffer
		if err := json.Compact(&b, raw); err != nil {
			return "", err
		}
		return b.String(), nil
	default:
		return "", fmt.Errorf("must be a JSON object or a string, got %.20s", raw)
	}
}

// callID is the call's id on the wire: its scripted id, else prefix,
// the request's sequence number and the call's index.
func (tc ToolCall) callID(seq, i int, prefix string) string {
	if tc.ID != "" {
		return tc.ID
	}
	return prefix + strconv.Itoa(seq) + "_" + strconv.Itoa(i)
}

// captured returns resp with the captured arguments of its tool calls
// filled from body, the request it answers, or an error naming the
// argument that has no match. resp must be valid.
func captured(resp Response, body []byte) (Response, error) {
	out := resp
	out.ToolCalls = slices.Clone(resp.ToolCalls)
	for i, tc := range resp.ToolCalls {
		if len(tc.Capture) == 0 {
			continue
		}
		raw, _ := tc.argumentString() // validated: an object
		var args map[string]json.RawMessage
		if err := json.Unmarshal([]byte(raw), &args); err != nil {
			return resp, fmt.Errorf("tool_calls[%d].arguments: %v", i, err)
		}
		if args == nil {
			args = map[string]json.RawMessage{}
		}
		for name, expr := range tc.Capture {
			all := regexp.MustCompile(expr).FindAll(body, -1)
			if len(all) == 0 {
				return resp, fmt.Errorf("tool_calls[%d].capture.%s: no match of %q in the request", i, name, expr)
			}
			v, err := json.Marshal(string(all[len(all)-1]))
			if err != nil {
				return resp, err
			}
			args[name] = v
		}
		filled, err := json.Marshal(args)
		if err != nil {
			return resp, err
		}
		out.ToolCalls[i].Arguments = filled
		out.ToolCalls[i].Capture = nil
	}
	return out, nil
}
