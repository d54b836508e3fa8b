package replay

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// responsesAPI is the OpenAI Responses wire format (POST /v1/responses),
// the one Codex speaks. A response's output is a list of items: a
// reasoning item (the script's reasoning_content, as a summary), a
// message item (its content) and one function_call item per tool call.
// The client sends a call's result back as a function_call_output item,
// with the call's call_id, in the input of its next request.
type responsesAPI struct{}

// responsesRequest is the part of a Responses request the server reads.
type responsesRequest struct {
	Model  string          `json:"model"`
	Input  json.RawMessage `json:"input"`
	Stream bool            `json:"stream"`
}

func (responsesAPI) parse(body []byte) (request, error) {
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return request{}, fmt.Errorf("body: %v", err)
	}
	out := request{model: req.Model, stream: req.Stream}
	switch in := string(req.Input); {
	case in == "" || in == "null":
		return out, fmt.Errorf("input: required (a string or a list of items)")
	case in[0] == '"':
		return out, nil
	case in[0] == '[':
		var items []json.RawMessage
		if err := json.Unmarshal(req.Input, &items); err != nil || len(items) == 0 {
			return out, fmt.Errorf("input: at least one item is required")
		}
		return out, nil
	default:
		return out, fmt.Errorf("input: must be a string or a list of items")
	}
}

func (responsesAPI) fail(w http.ResponseWriter, status int, code, msg string) {
	writeError(w, status, code, msg)
}

// responsesItems are the output items of a response, complete.
func responsesItems(t turn) []map[string]any {
	var items []map[string]any
	seq := strconv.Itoa(t.seq)
	if t.resp.ReasoningContent != "" {
		items = append(items, map[string]any{
			"id":      "rs_replay_" + seq,
			"type":    "reasoning",
			"summary": []any{map[string]any{"type": "summary_text", "text": t.resp.ReasoningContent}},
		})
	}
	if t.resp.Content != "" {
		items = append(items, map[string]any{
			"id":     "msg_replay_" + seq,
			"type":   "message",
			"status": "completed",
			"role":   "assistant",
			"content": []any{map[string]any{
				"type": "output_text", "text": t.resp.Content, "annotations": []any{},
			}},
		})
	}
	for i, tc := range t.resp.ToolCalls {
		args, _ := tc.argumentString() // validated by NewServer
		item := map[string]any{
			"id":        "fc_replay_" + seq + "_" + strconv.Itoa(i),
			"type":      "function_call",
			"status":    "completed",
			"call_id":   tc.callID(t.seq, i, "call_"),
			"name":      tc.Name,
			"arguments": args,
		}
		if tc.Namespace != "" {
			item["namespace"] = tc.Namespace
		}
		items = append(items, item)
	}
	return items
}

// responsesObject is the response object, in progress (no output, no
// usage) or completed.
func responsesObject(t turn, completed bool) map[string]any {
	o := map[string]any{
		"id":                  "resp_replay_" + strconv.Itoa(t.seq),
		"object":              "response",
		"created_at":          t.created,
		"status":              "in_progress",
		"model":               t.model,
		"output":              []any{},
		"parallel_tool_calls": true,
		"usage":               nil,
	}
	if completed {
		o["status"] = "completed"
		o["output"] = responsesItems(t)
		p, c := tokenCounts(t)
		o["usage"] = map[string]any{
			"input_tokens":          p,
			"input_tokens_details":  map[string]any{"cached_tokens": 0},
			"output_tokens":         c,
			"output_tokens_details": map[string]any{"reasoning_tokens": (len(t.resp.ReasoningContent) + 3) / 4},
			"total_tokens":          p + c,
		}
	}
	return o
}

func (responsesAPI) respond(w http.ResponseWriter, t turn) {
	if !t.req.stream {
		writeJSON(w, http.StatusOK, responsesObject(t, true))
		return
	}
	ev := startEvents(w)
	for n, e := range responsesEvents(t) {
		e.fields["type"] = e.typ
		e.fields["sequence_number"] = n
		if !ev.send(e.typ, e.fields) {
			return
		}
	}
}

// responsesEvent is one event of a streamed response; respond adds its
// type and sequence number to fields.
type responsesEvent struct {
	typ    string
	fields map[string]any
}

// responsesEvents are the events of a streamed response, in order: the
// response created and in progress, each output item's events
// (itemEvents), the response completed.
func responsesEvents(t turn) []responsesEvent {
	out := []responsesEvent{
		{"response.created", map[string]any{"response": responsesObject(t, false)}},
		{"response.in_progress", map[string]any{"response": responsesObject(t, false)}},
	}
	for idx, item := range responsesItems(t) {
		out = append(out, itemEvents(t, idx, item)...)
	}
	return append(out, responsesEvent{"response.completed", map[string]any{"response": responsesObject(t, true)}})
}

// itemEvents are the events of output item idx: the item added (without
// its content), its content in pieces, the item done.
func itemEvents(t turn, idx int, item map[string]any) []responsesEvent {
	id := item["id"].(string)
	added := map[string]any{}
	for k, v := range item {
		added[k] = v
	}
	var content []responsesEvent
	switch item["type"] {
	case "reasoning":
		added["summary"] = []any{}
		content = reasoningEvents(id, idx, t.resp.ReasoningContent)
	case "message":
		added["status"] = "in_progress"
		added["content"] = []any{}
		content = messageEvents(id, idx, t.resp.Content)
	case "function_call":
		added["status"] = "in_progress"
		added["arguments"] = ""
		content = argumentEvents(id, idx, item["arguments"].(string))
	default:
		return []responsesEvent{{"response.output_item.done", map[string]any{"output_index": idx, "item": item}}}
	}
	out := []responsesEvent{{"response.output_item.added", map[string]any{"output_index": idx, "item": added}}}
	out = append(out, content...)
	return append(out, responsesEvent{"response.output_item.done", map[string]any{"output_index": idx, "item": item}})
}

// reasoningEvents stream a reasoning item's summary text.
func reasoningEvents(id string, idx int, text string) []responsesEvent {
	out := []responsesEvent{{"response.reasoning_summary_part.added", map[string]any{"item_id": id, "output_index": idx, "summary_index": 0, "part": map[string]any{"type": "summary_text", "text": ""}}}}
	for _, piece := range pieces(text) {
		out = append(out, responsesEvent{"response.reasoning_summary_text.delta", map[string]any{"item_id": id, "output_index": idx, "summary_index": 0, "delta": piece}})
	}
	return append(out,
		responsesEvent{"response.reasoning_summary_text.done", map[string]any{"item_id": id, "output_index": idx, "summary_index": 0, "text": text}},
		responsesEvent{"response.reasoning_summary_part.done", map[string]any{"item_id": id, "output_index": idx, "summary_index": 0, "part": map[string]any{"type": "summary_text", "text": text}}})
}

// messageEvents stream a message item's output text.
func messageEvents(id string, idx int, text string) []responsesEvent {
	out := []responsesEvent{{"response.content_part.added", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "part": outputText("")}}}
	for _, piece := range pieces(text) {
		out = append(out, responsesEvent{"response.output_text.delta", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "delta": piece}})
	}
	return append(out,
		responsesEvent{"response.output_text.done", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "text": text}},
		responsesEvent{"response.content_part.done", map[string]any{"item_id": id, "output_index": idx, "content_index": 0, "part": outputText(text)}})
}

// outputText is a message's content part holding text.
func outputText(text string) map[string]any {
	return map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
}

// argumentEvents stream a function call's arguments in two halves.
func argumentEvents(id string, idx int, args string) []responsesEvent {
	half := halfway(args)
	return []responsesEvent{
		{"response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": idx, "delta": args[:half]}},
		{"response.function_call_arguments.delta", map[string]any{"item_id": id, "output_index": idx, "delta": args[half:]}},
		{"response.function_call_arguments.done", map[string]any{"item_id": id, "output_index": idx, "arguments": args}},
	}
}
