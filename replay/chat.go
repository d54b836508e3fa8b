package replay

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// chatAPI is the OpenAI/DeepSeek chat-completions wire format.
type chatAPI struct{}

// chatRequest is the part of a chat request the server reads.
type chatRequest struct {
	Model         string            `json:"model"`
	Messages      []json.RawMessage `json:"messages"`
	Stream        bool              `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (chatAPI) parse(body []byte) (request, error) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return request{}, fmt.Errorf("body: %v", err)
	}
	out := request{model: req.Model, stream: req.Stream, includeUsage: req.StreamOptions != nil && req.StreamOptions.IncludeUsage}
	if len(req.Messages) == 0 {
		return out, fmt.Errorf("messages: at least one message is required")
	}
	return out, nil
}

func (chatAPI) fail(w http.ResponseWriter, status int, code, msg string) {
	writeError(w, status, code, msg)
}

func (chatAPI) respond(w http.ResponseWriter, t turn) {
	id := "chatcmpl-replay-" + strconv.Itoa(t.seq)
	if t.req.stream {
		chatStream(w, id, t)
		return
	}
	writeJSON(w, http.StatusOK, chatCompletion(id, t))
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

// toolCalls are resp's calls on the chat wire, with ids filled in.
func toolCalls(resp Response, seq int) []wireToolCall {
	out := make([]wireToolCall, 0, len(resp.ToolCalls))
	for i, tc := range resp.ToolCalls {
		w := wireToolCall{ID: tc.callID(seq, i, "call_"), Type: "function"}
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

// tokenCounts is a rough count (4 bytes a token) of the prompt and the
// completion: clients only need the fields to be present and plausible.
func tokenCounts(t turn) (prompt, completion int) {
	n := len(t.resp.Content) + len(t.resp.ReasoningContent)
	for _, tc := range t.resp.ToolCalls {
		n += len(tc.Name) + len(tc.Arguments)
	}
	return (t.prompt + 3) / 4, (n + 3) / 4
}

func tokenUsage(t turn) usage {
	p, c := tokenCounts(t)
	return usage{PromptTokens: p, CompletionTokens: c, TotalTokens: p + c}
}

func chatCompletion(id string, t turn) map[string]any {
	resp := t.resp
	msg := map[string]any{"role": "assistant", "content": resp.Content}
	if resp.Content == "" && len(resp.ToolCalls) > 0 {
		msg["content"] = nil
	}
	if resp.ReasoningContent != "" {
		msg["reasoning_content"] = resp.ReasoningContent
	}
	if len(resp.ToolCalls) > 0 {
		msg["tool_calls"] = toolCalls(resp, t.seq)
	}
	return map[string]any{
		"id":      id,
		"object":  "chat.completion",
		"created": t.created,
		"model":   t.model,
		"choices": []any{map[string]any{
			"index":         0,
			"message":       msg,
			"logprobs":      nil,
			"finish_reason": finishReason(resp),
		}},
		"usage": tokenUsage(t),
	}
}

// chatStream sends the response as chat.completion.chunk events: the
// role, the reasoning and the content in pieces, each tool call's id and
// name and then its arguments in two pieces, the finish reason, the usage
// when the request asked for it, and [DONE].
func chatStream(w http.ResponseWriter, id string, t turn) {
	resp := t.resp
	ev := startEvents(w)
	send := func(delta map[string]any, finish any, u *usage) bool {
		choices := []any{}
		if delta != nil {
			choices = append(choices, map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish})
		}
		chunk := map[string]any{"id": id, "object": "chat.completion.chunk", "created": t.created, "model": t.model, "choices": choices}
		if u != nil {
			chunk["usage"] = u
		}
		return ev.send("", chunk)
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
	for i, tc := range toolCalls(resp, t.seq) {
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
	if t.req.includeUsage {
		u := tokenUsage(t)
		if !send(nil, nil, &u) {
			return
		}
	}
	ev.done()
}
