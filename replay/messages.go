package replay

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// messagesAPI is the Anthropic Messages wire format (POST /v1/messages),
// the one Claude Code speaks. A response's content is a list of blocks: a
// thinking block (the script's reasoning_content), a text block (its
// content) and one tool_use block per tool call, whose input is the
// call's arguments. The client sends a call's result back as a
// tool_result block, with the call's id as tool_use_id, in the user
// message of its next request.
type messagesAPI struct{}

// messagesRequest is the part of a Messages request the server reads.
type messagesRequest struct {
	Model     string            `json:"model"`
	Messages  []json.RawMessage `json:"messages"`
	MaxTokens *int              `json:"max_tokens"`
	Stream    bool              `json:"stream"`
}

func (messagesAPI) parse(body []byte) (request, error) {
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return request{}, fmt.Errorf("body: %v", err)
	}
	out := request{model: req.Model, stream: req.Stream}
	switch {
	case req.Model == "":
		return out, fmt.Errorf("model: required")
	case req.MaxTokens == nil:
		return out, fmt.Errorf("max_tokens: required")
	case len(req.Messages) == 0:
		return out, fmt.Errorf("messages: at least one message is required")
	}
	return out, nil
}

// fail writes an error in the Messages API's shape. Its error types are
// fixed names; the replay's own code goes into the message.
func (messagesAPI) fail(w http.ResponseWriter, status int, code, msg string) {
	typ := "invalid_request_error"
	switch {
	case status == http.StatusNotFound:
		typ = "not_found_error"
	case status == http.StatusRequestEntityTooLarge:
		typ = "request_too_large"
	case status >= 500:
		typ = "api_error"
	}
	writeJSON(w, status, map[string]any{"type": "error", "error": map[string]any{"type": typ, "message": code + ": " + msg}})
}

// thinkingSignature stands in for the signature a real model puts on its
// thinking blocks; clients send it back unread.
const thinkingSignature = "replay"

// messagesBlocks are the content blocks of a response, complete.
func messagesBlocks(t turn) []map[string]any {
	var blocks []map[string]any
	if t.resp.ReasoningContent != "" {
		blocks = append(blocks, map[string]any{"type": "thinking", "thinking": t.resp.ReasoningContent, "signature": thinkingSignature})
	}
	if t.resp.Content != "" {
		blocks = append(blocks, map[string]any{"type": "text", "text": t.resp.Content})
	}
	for i, tc := range t.resp.ToolCalls {
		args, _ := tc.argumentString() // validated by NewServer
		var input any = json.RawMessage(args)
		if !json.Valid([]byte(args)) {
			input = args // malformed on purpose: sent as a string
		}
		blocks = append(blocks, map[string]any{"type": "tool_use", "id": tc.callID(t.seq, i, "toolu_replay_"), "name": tc.Name, "input": input})
	}
	return blocks
}

// stopReason is the Messages API's name for why the response ended.
func stopReason(resp Response) string {
	switch {
	case resp.FinishReason != "":
		return resp.FinishReason
	case len(resp.ToolCalls) > 0:
		return "tool_use"
	default:
		return "end_turn"
	}
}

func messagesObject(t turn, blocks []map[string]any, stop any, output int) map[string]any {
	p, _ := tokenCounts(t)
	return map[string]any{
		"id":            "msg_replay_" + strconv.Itoa(t.seq),
		"type":          "message",
		"role":          "assistant",
		"model":         t.model,
		"content":       blocks,
		"stop_reason":   stop,
		"stop_sequence": nil,
		"usage": map[string]any{
			"input_tokens":                p,
			"cache_creation_input_tokens": 0,
			"cache_read_input_tokens":     0,
			"output_tokens":               output,
		},
	}
}

func (messagesAPI) respond(w http.ResponseWriter, t turn) {
	_, out := tokenCounts(t)
	if !t.req.stream {
		writeJSON(w, http.StatusOK, messagesObject(t, messagesBlocks(t), stopReason(t.resp), out))
		return
	}
	ev := startEvents(w)
	send := func(typ string, fields map[string]any) bool {
		fields["type"] = typ
		return ev.send(typ, fields)
	}
	if !send("message_start", map[string]any{"message": messagesObject(t, []map[string]any{}, nil, 1)}) {
		return
	}
	calls := 0
	for idx, block := range messagesBlocks(t) {
		start := map[string]any{}
		var deltas []map[string]any
		switch block["type"] {
		case "thinking":
			start = map[string]any{"type": "thinking", "thinking": "", "signature": ""}
			for _, piece := range pieces(t.resp.ReasoningContent) {
				deltas = append(deltas, map[string]any{"type": "thinking_delta", "thinking": piece})
			}
			deltas = append(deltas, map[string]any{"type": "signature_delta", "signature": thinkingSignature})
		case "text":
			start = map[string]any{"type": "text", "text": ""}
			for _, piece := range pieces(t.resp.Content) {
				deltas = append(deltas, map[string]any{"type": "text_delta", "text": piece})
			}
		case "tool_use":
			start = map[string]any{"type": "tool_use", "id": block["id"], "name": block["name"], "input": map[string]any{}}
			args, _ := t.resp.ToolCalls[calls].argumentString()
			calls++
			half := halfway(args)
			deltas = append(deltas,
				map[string]any{"type": "input_json_delta", "partial_json": args[:half]},
				map[string]any{"type": "input_json_delta", "partial_json": args[half:]})
		}
		if !send("content_block_start", map[string]any{"index": idx, "content_block": start}) {
			return
		}
		for _, d := range deltas {
			if !send("content_block_delta", map[string]any{"index": idx, "delta": d}) {
				return
			}
		}
		if !send("content_block_stop", map[string]any{"index": idx}) {
			return
		}
	}
	if !send("message_delta", map[string]any{"delta": map[string]any{"stop_reason": stopReason(t.resp), "stop_sequence": nil}, "usage": map[string]any{"output_tokens": out}}) {
		return
	}
	send("message_stop", map[string]any{})
}
