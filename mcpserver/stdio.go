package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// DefaultMaxMessageBytes bounds one inbound JSON-RPC message (one line)
// of a StdioTransport.
const DefaultMaxMessageBytes = 16 << 20

// StdioTransport is the MCP stdio transport (one JSON-RPC message per
// line) that survives its client's mistakes: a line that is not JSON is
// answered with a -32700 parse error, one that is JSON but not a JSON-RPC
// message (or a batch, or longer than MaxMessageBytes) with -32600
// invalid request, and the connection keeps serving — with it the
// server's background jobs. The SDK's own stdio transport ends the
// connection at the first such line. Only the end of In ends it.
type StdioTransport struct {
	In  io.Reader
	Out io.Writer
	// MaxMessageBytes bounds one line; 0 means DefaultMaxMessageBytes.
	MaxMessageBytes int
}

// Connect implements mcp.Transport.
func (t *StdioTransport) Connect(context.Context) (mcp.Connection, error) {
	limit := t.MaxMessageBytes
	if limit <= 0 {
		limit = DefaultMaxMessageBytes
	}
	c := &stdioConn{out: t.Out, lines: make(chan []byte), closed: make(chan struct{})}
	go c.readLines(t.In, limit)
	return c, nil
}

type stdioConn struct {
	wmu     sync.Mutex
	out     io.Writer
	lines   chan []byte // nil slice: a line over the bound
	readErr error       // set before lines is closed
	closed  chan struct{}
	once    sync.Once
}

// readLines sends every line of in (without its line end) on c.lines,
// a nil slice for one longer than limit (whose rest is skipped), and
// closes c.lines at the end of in.
func (c *stdioConn) readLines(in io.Reader, limit int) {
	defer close(c.lines)
	br := bufio.NewReaderSize(in, 64<<10)
	for {
		var line []byte
		tooLong := false
		for {
			chunk, err := br.ReadSlice('\n')
			if !tooLong {
				if len(line)+len(chunk) > limit+1 { // +1: the newline
					tooLong, line = true, nil
				} else {
					line = append(line, chunk...)
				}
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			if err != nil && (err != io.EOF || (len(line) == 0 && !tooLong)) {
				c.readErr = err
				return
			}
			break
		}
		if !tooLong {
			line = bytes.TrimRight(line, "\r\n")
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
		}
		select {
		case c.lines <- line:
		case <-c.closed:
			return
		}
	}
}

// Read returns the next JSON-RPC message. A line that is not one is
// answered with a JSON-RPC error response here and skipped.
func (c *stdioConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		var line []byte
		var ok bool
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.closed:
			return nil, io.EOF
		case line, ok = <-c.lines:
		}
		if !ok {
			if c.readErr != nil {
				return nil, c.readErr
			}
			return nil, io.EOF
		}
		msg, code, why := decodeLine(line)
		if msg != nil {
			return msg, nil
		}
		if err := c.writeError(ctx, requestID(line), code, why); err != nil {
			return nil, err
		}
	}
}

// decodeLine decodes one line as a JSON-RPC message, or says which
// JSON-RPC error answers it.
func decodeLine(line []byte) (jsonrpc.Message, int, string) {
	if line == nil {
		return nil, jsonrpc.CodeInvalidRequest, "invalid request: the message is longer than the line limit"
	}
	if !json.Valid(line) {
		var v any
		err := json.Unmarshal(line, &v)
		return nil, jsonrpc.CodeParseError, fmt.Sprintf("parse error: %v", err)
	}
	if trimmed := bytes.TrimSpace(line); trimmed[0] != '{' {
		if trimmed[0] == '[' {
			return nil, jsonrpc.CodeInvalidRequest, "invalid request: batches are not supported; send one message per line"
		}
		return nil, jsonrpc.CodeInvalidRequest, "invalid request: a JSON-RPC message is a JSON object"
	}
	msg, err := jsonrpc.DecodeMessage(line)
	if err != nil {
		return nil, jsonrpc.CodeInvalidRequest, fmt.Sprintf("invalid request: %v", err)
	}
	if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "" {
		return nil, jsonrpc.CodeInvalidRequest, "invalid request: method is empty"
	}
	return msg, 0, ""
}

// requestID is the id of a line that is a JSON object with a string or
// number "id", as raw JSON; else null (JSON-RPC answers an unreadable
// request with id null).
func requestID(line []byte) json.RawMessage {
	var probe struct {
		ID json.RawMessage `json:"id"`
	}
	if line != nil && json.Unmarshal(line, &probe) == nil && len(probe.ID) > 0 {
		var v any
		if json.Unmarshal(probe.ID, &v) == nil {
			switch v.(type) {
			case string, float64:
				return probe.ID
			}
		}
	}
	return json.RawMessage("null")
}

// errorResponse is a JSON-RPC error response; id may be null, which
// jsonrpc.Response cannot say.
type errorResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Error   struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

func (c *stdioConn) writeError(ctx context.Context, id json.RawMessage, code int, message string) error {
	r := errorResponse{JSONRPC: "2.0", ID: id}
	r.Error.Code, r.Error.Message = code, message
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return c.writeLine(ctx, data)
}

// Write implements mcp.Connection: one message per line.
func (c *stdioConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	data, err := jsonrpc.EncodeMessage(msg)
	if err != nil {
		return err
	}
	return c.writeLine(ctx, data)
}

func (c *stdioConn) writeLine(ctx context.Context, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-c.closed:
		return errors.New("mcp stdio: connection closed")
	default:
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.out.Write(append(data, '\n'))
	return err
}

// Close ends Read; the reader of In stops at its next line (stdin cannot
// be interrupted portably).
func (c *stdioConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return nil
}

// SessionID implements mcp.Connection: stdio has no session id.
func (c *stdioConn) SessionID() string { return "" }
