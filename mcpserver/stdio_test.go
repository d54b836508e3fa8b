package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// stdioClient drives a Server through a StdioTransport over pipes, as
// an MCP client on the other end of stdin and stdout would.
type stdioClient struct {
	t     testing.TB
	in    *io.PipeWriter
	out   *bufio.Scanner
	ran   chan error // Run's result
	lines chan string
}

func startStdio(t testing.TB, ex sandbox.Executor) *stdioClient {
	t.Helper()
	srv, err := New(Options{
		Executor: ex,
		Policy:   testPolicy,
		Session:  sandbox.Session{ID: "s1", Cwd: "/srv/proj", TranscriptDir: "/h/sessions/--srv-proj--/s1"},
		Snapshot: func(context.Context) ([]string, error) { return []string{"DSH_SESSION_ID=s1"}, nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	c := &stdioClient{t: t, in: inW, ran: make(chan error, 1), lines: make(chan string, 64)}
	go func() {
		c.ran <- srv.Run(context.Background(), &StdioTransport{In: inR, Out: outW, MaxMessageBytes: 4096})
		outW.Close()
	}()
	go func() {
		sc := bufio.NewScanner(outR)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	c.send(`{"jsonrpc":"2.0","id":"init","method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`)
	c.await(`"init"`)
	c.send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return c
}

func (c *stdioClient) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.in, line+"\n"); err != nil {
		c.t.Fatalf("writing %q: %v (the server stopped reading)", line, err)
	}
}

// await returns the response whose id is the raw JSON id, skipping
// others; the server ending or 10 s passing fails the test.
func (c *stdioClient) await(id string) map[string]any {
	c.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case line, ok := <-c.lines:
			if !ok {
				c.t.Fatalf("the server ended before answering id %s: %v", id, <-c.ran)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(line), &m); err != nil {
				c.t.Fatalf("server wrote a line that is not JSON: %q", line)
			}
			if string(m["id"]) == id {
				var out map[string]any
				json.Unmarshal([]byte(line), &out)
				return out
			}
		case <-timeout:
			c.t.Fatalf("no answer to id %s within 10 s", id)
		}
	}
}

func (c *stdioClient) close() error {
	c.in.Close()
	for range c.lines {
	}
	return <-c.ran
}

func errorCode(m map[string]any) float64 {
	e, _ := m["error"].(map[string]any)
	code, _ := e["code"].(float64)
	return code
}

func TestStdioMalformedInputKeepsServing(t *testing.T) {
	c := startStdio(t, &fakeExecutor{})
	// A background job, started before the garbage, must survive it.
	c.send(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"bash","arguments":{"command":"block","run_in_background":true}}}`)
	started := fmt.Sprint(c.await("1")["result"])
	i := strings.Index(started, "bash-")
	if i < 0 {
		t.Fatalf("no job id in %s", started)
	}
	job := started[i : i+strings.IndexAny(started[i:], " \n]\"")]
	cases := []struct {
		name, line, id string
		code           float64
	}{
		{"NotJSON", `{"jsonrpc":"2.0","id":7,"method":`, "null", -32700},
		{"Garbage", `hello`, "null", -32700},
		{"NotAnObject", `42`, "null", -32600},
		{"Batch", `[{"jsonrpc":"2.0","id":8,"method":"ping"}]`, "null", -32600},
		{"WrongVersion", `{"jsonrpc":"1.0","id":9,"method":"ping"}`, "9", -32600},
		{"NoMethodNoID", `{"jsonrpc":"2.0"}`, "null", -32600},
		{"BadID", `{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}`, "null", -32600},
		{"TooLong", `{"jsonrpc":"2.0","id":10,"method":"ping","params":{"x":"` + strings.Repeat("a", 5000) + `"}}`, "null", -32600},
		{"UnknownMethod", `{"jsonrpc":"2.0","id":11,"method":"no/such"}`, "11", -32601},
		{"BadParams", `{"jsonrpc":"2.0","id":12,"method":"tools/call","params":"x"}`, "12", -32602},
	}
	for _, tc := range cases {
		c.send(tc.line)
		if got := errorCode(c.await(tc.id)); got != tc.code {
			t.Errorf("%s: error code %v, want %v", tc.name, got, tc.code)
		}
		// The legitimate request right after is answered.
		c.send(`{"jsonrpc":"2.0","id":"probe","method":"ping"}`)
		if m := c.await(`"probe"`); m["error"] != nil {
			t.Errorf("%s: ping after it = %v", tc.name, m)
		}
	}
	c.send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"job_output","arguments":{"job_id":"` + job + `"}}}`)
	if out := fmt.Sprint(c.await("2")["result"]); !strings.Contains(out, "[running]") {
		t.Errorf("job_output after the malformed lines = %s, want the job still running", out)
	}
	if err := c.close(); err != nil {
		t.Errorf("Run after stdin closed = %v", err)
	}
}

// FuzzStdioTransport feeds the MCP server arbitrary input after the
// handshake; the server must go on answering a ping after it, write only
// JSON lines, and never end before its stdin does.
func FuzzStdioTransport(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":7,"method":`, `hello`, `[]`, `[1,2]`, `null`, `"x"`, `{}`, `{"jsonrpc":"2.0"}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`, `{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"bash","arguments":{"command":"echo hi"}}}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"job_output","arguments":{"job_id":"bash-x"}}}`,
		`{"jsonrpc":"2.0","id":"probe","method":"ping"}`, "\x00\xff", "{\"jsonrpc\":\"2.0\",\"id\":1e999,\"method\":\"ping\"}",
		`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"probe"}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, input string) {
		c := startStdio(t, &fakeExecutor{})
		c.send(strings.ReplaceAll(input, "probe", "prob"))
		c.send(`{"jsonrpc":"2.0","id":"probe","method":"ping"}`)
		c.await(`"probe"`)
		if err := c.close(); err != nil {
			t.Errorf("Run after stdin closed = %v", err)
		}
	})
}
