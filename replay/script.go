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
			if _, err := tc.argumentString(); err != nil {
				return fmt.Errorf("replay script: responses[%d].tool_calls[%d].arguments: %v", i, j, err)
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
