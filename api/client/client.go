// Package client is the Go client of the dsh-sandbox service (package api):
// it speaks the /v1 JSON API over a Unix socket or TCP with an optional
// bearer token. The CLI's `exec --server` uses it; any Go harness may
// import it. It imports the wire types (api/types) and the light sandbox,
// session and persistence packages, never the server (package api): a
// test bans server-only modules from its import graph.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

// maxEventBytes bounds one NDJSON line of a stream.
const maxEventBytes = 64 << 20

// Options configure a Client. The zero value sends no token.
type Options struct {
	// Token is the bearer token of a TCP listener; empty sends none.
	Token string
	// HTTPClient overrides the transport (its Transport is replaced for
	// unix addresses); nil means a new one without timeouts (calls are
	// bounded by their contexts).
	HTTPClient *http.Client
	// RetryFor bounds how long a request answered 429 (overloaded) is
	// retried, honouring each answer's Retry-After (DefaultRetryFor is a
	// good value); 0 or negative means no retry: the 429 is returned. A
	// retry never waits past the request context's deadline, nor when the
	// service asks for more than 10 s.
	RetryFor time.Duration
	// WrapTransport, when set, wraps the transport the client sends
	// through (after a unix address replaced it), e.g. to trace or check
	// every answer; nil sends through it as it is.
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// Retry bounds of Options.RetryFor.
const (
	// DefaultRetryFor is how long the CLI retries a 429.
	DefaultRetryFor = 30 * time.Second
	// maxRetryAfter caps one wait, whatever Retry-After says.
	maxRetryAfter = 10 * time.Second
	// defaultRetryAfter is the wait when a 429 has no usable Retry-After.
	defaultRetryAfter = time.Second
)

// Client talks to one service. It is safe for concurrent use.
type Client struct {
	base     string
	token    string
	hc       *http.Client
	retryFor time.Duration
}

// New returns a client of the service at addr: "unix:///path.sock",
// "tcp://host:port" or "http://host:port".
func New(addr string, opts Options) (*Client, error) {
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	c := &Client{token: opts.Token, hc: hc, retryFor: max(opts.RetryFor, 0)}
	switch {
	case strings.HasPrefix(addr, "unix://"):
		_, path, err := types.ParseListen(addr)
		if err != nil {
			return nil, err
		}
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}}
		copied := *hc
		copied.Transport = tr
		c.hc = &copied
		c.base = "http://dsh-sandbox"
	case strings.HasPrefix(addr, "tcp://"):
		_, hostport, err := types.ParseListen(addr)
		if err != nil {
			return nil, err
		}
		c.base = "http://" + hostport
	case strings.HasPrefix(addr, "http://"):
		c.base = strings.TrimSuffix(addr, "/")
	default:
		return nil, fmt.Errorf("server address %q: want unix:///PATH, tcp://HOST:PORT or http://HOST:PORT", addr)
	}
	if opts.WrapTransport != nil {
		tr := c.hc.Transport
		if tr == nil {
			tr = http.DefaultTransport
		}
		copied := *c.hc
		copied.Transport = opts.WrapTransport(tr)
		c.hc = &copied
	}
	return c, nil
}

// do sends one request; an error answer becomes an error of its class.
// A 429 is retried until c.retryFor has passed (retryWait), each time
// after its Retry-After; the body is sent again from its bytes.
func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "request: %v", err)
		}
	}
	deadline := time.Now().Add(c.retryFor)
	for {
		var body io.Reader
		if data != nil {
			body = bytes.NewReader(data)
		}
		resp, err := c.send(ctx, method, path, body, "application/json")
		if err != nil {
			return nil, err
		}
		if resp.StatusCode < 300 {
			return resp, nil
		}
		wait, retry := time.Duration(0), false
		if resp.StatusCode == http.StatusTooManyRequests {
			wait, retry = retryWait(ctx, resp.Header.Get("Retry-After"), deadline, time.Now())
		}
		err = decodeError(resp)
		resp.Body.Close()
		if !retry {
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// send sends one request with body (nil: none) of contentType.
func (c *Client) send(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "service: %w", err)
	}
	return resp, nil
}

// retryWait is how long to wait before retrying a 429 whose Retry-After
// is header (delay-seconds or an HTTP date; absent or unreadable means
// defaultRetryAfter), and whether to retry at all: not when the service
// asks for more than maxRetryAfter, nor when the wait would end after the
// retry deadline or ctx's deadline.
func retryWait(ctx context.Context, header string, deadline, now time.Time) (time.Duration, bool) {
	wait := defaultRetryAfter
	header = strings.TrimSpace(header)
	if n, err := strconv.ParseInt(header, 10, 64); err == nil && n >= 0 {
		if n > int64(maxRetryAfter/time.Second) {
			return 0, false
		}
		wait = time.Duration(n) * time.Second
	} else if at, err := http.ParseTime(header); err == nil {
		wait = max(at.Sub(now), 0)
	}
	if wait > maxRetryAfter {
		return 0, false
	}
	end := now.Add(wait)
	if end.After(deadline) {
		return 0, false
	}
	if d, ok := ctx.Deadline(); ok && end.After(d) {
		return 0, false
	}
	return wait, ctx.Err() == nil
}

// decodeError turns an error answer into an error of the same class; an
// answer without an error body gets the class of its status.
func decodeError(resp *http.Response) error {
	var e types.ErrorResponse
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(data, &e); err == nil && e.Error.Class != "" {
		return e.Error.Err()
	}
	class := sandbox.ErrInternal
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		class = types.ErrUnauthorized
	case http.StatusForbidden:
		class = types.ErrForbidden
	case http.StatusTooManyRequests:
		class = types.ErrOverloaded
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		class = sandbox.ErrUnavailable
	}
	return fmt.Errorf("%w: service answered %s", class, resp.Status)
}

func (c *Client) call(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	return decodeAnswer(resp, path, out)
}

// decodeAnswer decodes the JSON answer to path into out and closes it.
func decodeAnswer(resp *http.Response, path string, out any) error {
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return sandbox.Errorf(sandbox.ErrInternal, "decoding the answer of %s: %v", path, err)
	}
	return nil
}

// Run runs a foreground call and returns its one JSON result. req.Stream
// is ignored.
func (c *Client) Run(ctx context.Context, req types.RunRequest) (*types.RunResponse, error) {
	req.Stream = false
	var out types.RunResponse
	if err := c.call(ctx, http.MethodPost, "/v1/run", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Stream runs a foreground call, copying its output to stdout and stderr
// (either may be nil) as it arrives, and returns the final result.
// Cancelling ctx disconnects, which cancels the call on the service.
func (c *Client) Stream(ctx context.Context, req types.RunRequest, stdout, stderr io.Writer) (*types.RunResponse, error) {
	req.Stream = true
	resp, err := c.do(ctx, http.MethodPost, "/v1/run", req)
	if err != nil {
		return nil, err
	}
	return readEvents(ctx, resp, stdout, stderr)
}

// StreamStdin is Stream with stdin streamed to the command as the
// command reads it (any size up to the service's bound, binary as it is):
// the request is a multipart body of the JSON request and stdin, and the
// output arrives while stdin is still being sent. req.Stdin must be
// empty. A 429 is not retried (stdin cannot be sent again).
func (c *Client) StreamStdin(ctx context.Context, req types.RunRequest, stdin io.Reader, stdout, stderr io.Writer) (*types.RunResponse, error) {
	req.Stream = true
	head, err := json.Marshal(req)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "request: %v", err)
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		pw.CloseWithError(writeParts(mw, head, stdin))
	}()
	defer pr.Close() // ends the writer when the answer came first
	resp, err := c.send(ctx, http.MethodPost, "/v1/run", pr, mw.FormDataContentType())
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return readEvents(ctx, resp, stdout, stderr)
}

// writeParts writes the multipart body of StreamStdin: the JSON request,
// then stdin.
func writeParts(mw *multipart.Writer, head []byte, stdin io.Reader) error {
	part, err := mw.CreatePart(textproto.MIMEHeader{
		"Content-Disposition": {`form-data; name="request"`},
		"Content-Type":        {"application/json"},
	})
	if err != nil {
		return err
	}
	if _, err := part.Write(head); err != nil {
		return err
	}
	if stdin != nil {
		part, err = mw.CreatePart(textproto.MIMEHeader{
			"Content-Disposition": {`form-data; name="stdin"`},
			"Content-Type":        {"application/octet-stream"},
		})
		if err != nil {
			return err
		}
		if _, err := io.Copy(part, stdin); err != nil {
			return err
		}
	}
	return mw.Close()
}

// readEvents reads the NDJSON answer of a streaming run, copying output
// to stdout and stderr (either may be nil), until its result or error.
func readEvents(ctx context.Context, resp *http.Response, stdout, stderr io.Writer) (*types.RunResponse, error) {
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	for sc.Scan() {
		var ev types.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInternal, "stream event: %v", err)
		}
		switch ev.Type {
		case types.EventStdout:
			if stdout != nil {
				_, _ = stdout.Write(ev.Data)
			}
		case types.EventStderr:
			if stderr != nil {
				_, _ = stderr.Write(ev.Data)
			}
		case types.EventResult:
			return &types.RunResponse{ExecutionID: ev.ExecutionID, Result: ev.Result, Rendered: ev.Rendered}, nil
		case types.EventError:
			if ev.Error == nil {
				return nil, sandbox.Errorf(sandbox.ErrInternal, "stream: error event without error")
			}
			return nil, ev.Error.Err()
		}
	}
	if err := sc.Err(); err != nil {
		if ctx.Err() != nil {
			return nil, sandbox.Errorf(sandbox.ErrUnavailable, "stream: %w", ctx.Err())
		}
		return nil, sandbox.Errorf(sandbox.ErrInternal, "stream: %v", err)
	}
	return nil, sandbox.Errorf(sandbox.ErrInternal, "stream ended without a result")
}

// StartJob starts a background job and returns its id.
func (c *Client) StartJob(ctx context.Context, req types.RunRequest) (string, error) {
	req.Stream = false
	var out types.StartResponse
	if err := c.call(ctx, http.MethodPost, "/v1/jobs", req, &out); err != nil {
		return "", err
	}
	return out.ID, nil
}

func jobPath(id, sessionID, suffix string) string {
	return "/v1/jobs/" + url.PathEscape(id) + suffix + "?session=" + url.QueryEscape(sessionID)
}

// Jobs lists the jobs of a session ("" for calls with no agent).
func (c *Client) Jobs(ctx context.Context, sessionID string) ([]sandbox.JobInfo, error) {
	var out types.JobsResponse
	if err := c.call(ctx, http.MethodGet, "/v1/jobs?session="+url.QueryEscape(sessionID), nil, &out); err != nil {
		return nil, err
	}
	return out.Jobs, nil
}

// JobOutput reads a job's output since the previous read. When the job
// ended with a sandbox error, Err of the returned output is set.
func (c *Client) JobOutput(ctx context.Context, sessionID, id string) (sandbox.JobOutput, error) {
	var out types.JobOutputResponse
	if err := c.call(ctx, http.MethodGet, jobPath(id, sessionID, ""), nil, &out); err != nil {
		return sandbox.JobOutput{}, err
	}
	if out.Error != nil {
		out.JobOutput.Err = out.Error.Err()
	}
	return out.JobOutput, nil
}

// WriteJobStdin sends data into the open stdin of a job started with
// StdinOpen (binary as it is; it returns once the command has taken it,
// or the job ended), and closes that stdin afterwards when closeAfter is
// set. It returns the bytes the stdin took and whether it is closed now.
func (c *Client) WriteJobStdin(ctx context.Context, sessionID, id string, data io.Reader, closeAfter bool) (types.StdinResponse, error) {
	path := jobPath(id, sessionID, "/stdin")
	if closeAfter {
		path += "&close=true"
	}
	var out types.StdinResponse
	if data == nil {
		data = http.NoBody
	}
	resp, err := c.send(ctx, http.MethodPost, path, data, "application/octet-stream")
	if err != nil {
		return out, err
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return out, decodeError(resp)
	}
	return out, decodeAnswer(resp, path, &out)
}

// KillJob stops a job and waits until it has ended.
func (c *Client) KillJob(ctx context.Context, sessionID, id string) error {
	var out types.StartResponse
	return c.call(ctx, http.MethodPost, jobPath(id, sessionID, "/kill"), nil, &out)
}

// RemoveJob kills a job and forgets it.
func (c *Client) RemoveJob(ctx context.Context, sessionID, id string) error {
	var out types.StartResponse
	return c.call(ctx, http.MethodDelete, jobPath(id, sessionID, ""), nil, &out)
}

// Declarations lists the declared DSH_* keys.
func (c *Client) Declarations(ctx context.Context) ([]types.Declaration, error) {
	var out types.DeclarationsResponse
	if err := c.call(ctx, http.MethodGet, "/v1/env", nil, &out); err != nil {
		return nil, err
	}
	return out.Declarations, nil
}

// Snapshot returns the DSH_* snapshot a call of the session would get now
// (h nil: a call with no agent), as sorted KEY=VALUE.
func (c *Client) Snapshot(ctx context.Context, h *session.Header) ([]string, error) {
	var out types.SnapshotResponse
	if err := c.call(ctx, http.MethodPost, "/v1/snapshot", types.SessionRequest{Session: h}, &out); err != nil {
		return nil, err
	}
	return out.Env, nil
}

// Locate returns where the session's transcript lives; ok is false when
// the service's store has no per-session local file.
func (c *Client) Locate(ctx context.Context, h session.Header) (loc persistence.Location, ok bool, err error) {
	var out types.LocateResponse
	if err := c.call(ctx, http.MethodPost, "/v1/locate", types.SessionRequest{Session: &h}, &out); err != nil {
		return persistence.Location{}, false, err
	}
	if out.Location == nil {
		return persistence.Location{}, false, nil
	}
	return *out.Location, true, nil
}

// Health returns nil when the service answers its health check.
func (c *Client) Health(ctx context.Context) error {
	var out types.HealthResponse
	if err := c.call(ctx, http.MethodGet, "/v1/health", nil, &out); err != nil {
		return err
	}
	if out.Status != "ok" {
		return errors.New("service health: " + out.Status)
	}
	return nil
}

// Calls lists this client's executions that have not ended: foreground
// runs and background jobs, queued or running.
func (c *Client) Calls(ctx context.Context) ([]types.CallInfo, error) {
	var out types.CallsResponse
	if err := c.call(ctx, http.MethodGet, "/v1/calls", nil, &out); err != nil {
		return nil, err
	}
	return out.Calls, nil
}

// CancelCall cancels one of this client's executions by its execution id
// and waits until it has ended.
func (c *Client) CancelCall(ctx context.Context, id string) error {
	var out types.StartResponse
	return c.call(ctx, http.MethodDelete, "/v1/calls/"+url.PathEscape(id), nil, &out)
}
