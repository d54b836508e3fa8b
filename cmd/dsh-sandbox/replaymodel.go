package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/dsh-sandbox/dsh-sandbox/replay"
)

func replayModelCommand() *cli.Command {
	return &cli.Command{
		Name:  "replay-model",
		Usage: "serve a scripted model on loopback in the OpenAI chat, OpenAI Responses and Anthropic Messages formats (keyless tests)",
		Description: `Answers, with the script's responses in order (one script, whichever endpoint asks):

   POST /v1/chat/completions   OpenAI/DeepSeek chat completions (dsh, any chat client)
   POST /v1/responses          the OpenAI Responses API (Codex: wire_api = "responses")
   POST /v1/messages           the Anthropic Messages API, also ?beta=true (Claude Code:
                               ANTHROPIC_BASE_URL)
   GET  /v1/models             the script's model

(each also without /v1). A response streams as server-sent events when the request says
"stream": true, else comes as one JSON object; tool calls are sent in each format's own
shape (tool_calls, function_call items, tool_use blocks) and their results come back in
the next request. A request after the last response gets a 400 error with code
replay_script_exhausted. Any API key, or none, is accepted.

The script is JSON:
   {"model": "optional name",
    "responses": [
      {"content": "text", "reasoning_content": "optional",
       "tool_calls": [{"id": "optional", "name": "bash", "arguments": {"command": "ls"}}]},
      {"tool_calls": [{"name": "job_output", "capture": {"job_id": "bash-[0-9a-f]{16}"}}]},
      {"content": "done"}]}

A tool call's "namespace" is sent on /v1/responses only (Codex offers MCP tools as namespace
"mcp__<server>" holding the tool's name). "capture" fills an argument with the last match of a
regular expression in the request being answered (a previous tool result): for values a
script cannot know in advance, such as a background job's id.

It prints the base URL (http://127.0.0.1:PORT/v1) on stdout once it listens, then serves
until SIGINT or SIGTERM. Codex takes that URL as its provider's base_url; Claude Code takes
it without the /v1 as ANTHROPIC_BASE_URL. --record appends one JSON line per request of any
endpoint (path, query, the body and header names, never header values).

Examples:
   dsh-sandbox replay-model --script integration/testdata/replay-bash.json
   dsh-sandbox replay-model --script s.json --listen 127.0.0.1:8089 --record requests.jsonl`,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "script", Required: true, Usage: "the conversation script `FILE` (JSON)"},
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:0", Usage: "loopback `HOST:PORT` to listen on (port 0: any free port)"},
			&cli.StringFlag{Name: "record", Usage: "append each request received to `FILE` as a JSON line (created 0600)"},
			jsonFlag,
		},
		Action: runReplayModel,
	}
}

func runReplayModel(c *cli.Context) error {
	if c.NArg() > 0 {
		return usageError("replay-model takes no arguments, got %q", c.Args().First())
	}
	data, err := readBounded(c.String("script"), replay.MaxScriptBytes)
	if err != nil {
		return usageError("--script: %v", err)
	}
	script, err := replay.ParseScript(data)
	if err != nil {
		return usageError("--script: %v", err)
	}
	addr := c.String("listen")
	if err := checkLoopback(addr); err != nil {
		return usageError("--listen: %v", err)
	}
	var record io.Writer // nil: record nothing
	if f := c.String("record"); f != "" {
		file, err := os.OpenFile(f, os.O_WRONLY|os.O_CREATE|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return usageError("--record: %v", err)
		}
		defer file.Close()
		record = file
	}
	srv, err := replay.NewServer(script, record)
	if err != nil {
		return usageError("--script: %v", err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	baseURL := "http://" + ln.Addr().String() + "/v1"
	if c.Bool("json") {
		err = writeJSON(c.App.Writer, map[string]any{"baseURL": baseURL, "address": ln.Addr().String(), "responses": len(script.Responses)})
	} else {
		_, err = fmt.Fprintln(c.App.Writer, baseURL)
	}
	if err != nil {
		ln.Close()
		return err
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-c.Context.Done():
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Context), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(ctx); err != nil {
		_ = hs.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// checkLoopback refuses an address that is not a loopback IP or
// "localhost": the replay model accepts any key, so it must not be
// reachable from other machines.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address (127.0.0.1, [::1] or localhost)", host)
	}
	return nil
}
