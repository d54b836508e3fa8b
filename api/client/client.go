// Package client is the Go client of the dsh-sandbox service (package api):
// it speaks the /v1 JSON API over a Unix socket or TCP with an optional
// bearer token. The CLI's `exec --server` uses it; any Go harness may
// import it. It imports api, sandbox, session and persistence only.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api"
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
		_, path, err := api.ParseListen(addr)
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
		_, hostport, err := api.ParseListen(addr)
		if err != nil {
			return nil, err
		}
		c.base = "http://" + hostport
	case strings.HasPrefix(addr, "http://"):
		c.base = strings.TrimSuffix(addr, "/")
	default:
		return nil, fmt.Errorf("server address %q: want unix:///PATH, tcp://HOST:PORT or http://HOST:PORT", addr)
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
		resp, err := c.send(ctx, method, path, data)
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

func (c *Client) send(ctx context.Context, method, path string, data []byte) (*http.Response, error) {
	var rd io.Reader
	if data != nil {
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "request: %v", err)
	}
	if data != nil {
		req.Header.Set("Content-Type", "application/json")
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
	var e api.ErrorResponse
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(data, &e); err == nil && e.Error.Class != "" {
		return e.Error.Err()
	}
	class := sandbox.ErrInternal
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		class = api.ErrUnauthorized
	case http.StatusForbidden:
		class = api.ErrForbidden
	case http.StatusTooManyRequests:
		class = api.ErrOverloaded
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
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return sandbox.Errorf(sandbox.ErrInternal, "decoding the answer of %s: %v", path, err)
	}
	return nil
}

// Run runs a foreground call and returns its one JSON result. req.Stream
// is ignored.
func (c *Client) Run(ctx context.Context, req api.RunRequest) (*api.RunResponse, error) {
	req.Stream = false
	var out api.RunResponse
	if err := c.call(ctx, http.MethodPost, "/v1/run", req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Stream runs a foreground call, copying its output to stdout and stderr
// (either may be nil) as it arrives, and returns the final result.
// Cancelling ctx disconnects, which cancels the call on the service.
func (c *Client) Stream(ctx context.Context, req api.RunRequest, stdout, stderr io.Writer) (*api.RunResponse, error) {
	req.Stream = true
	resp, err := c.do(ctx, http.MethodPost, "/v1/run", req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEventBytes)
	for sc.Scan() {
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInternal, "stream event: %v", err)
		}
		switch ev.Type {
		case api.EventStdout:
			if stdout != nil {
				_, _ = stdout.Write(ev.Data)
			}
		case api.EventStderr:
			if stderr != nil {
				_, _ = stderr.Write(ev.Data)
			}
		case api.EventResult:
			return &api.RunResponse{ExecutionID: ev.ExecutionID, Result: ev.Result, Rendered: ev.Rendered}, nil
		case api.EventError:
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
func (c *Client) StartJob(ctx context.Context, req api.RunRequest) (string, error) {
	req.Stream = false
	var out api.StartResponse
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
	var out api.JobsResponse
	if err := c.call(ctx, http.MethodGet, "/v1/jobs?session="+url.QueryEscape(sessionID), nil, &out); err != nil {
		return nil, err
	}
	return out.Jobs, nil
}

// JobOutput reads a job's output since the previous read. When the job
// ended with a sandbox error, Err of the returned output is set.
func (c *Client) JobOutput(ctx context.Context, sessionID, id string) (sandbox.JobOutput, error) {
	var out api.JobOutputResponse
	if err := c.call(ctx, http.MethodGet, jobPath(id, sessionID, ""), nil, &out); err != nil {
		return sandbox.JobOutput{}, err
	}
	if out.Error != nil {
		out.JobOutput.Err = out.Error.Err()
	}
	return out.JobOutput, nil
}

// KillJob stops a job and waits until it has ended.
func (c *Client) KillJob(ctx context.Context, sessionID, id string) error {
	var out api.StartResponse
	return c.call(ctx, http.MethodPost, jobPath(id, sessionID, "/kill"), nil, &out)
}

// RemoveJob kills a job and forgets it.
func (c *Client) RemoveJob(ctx context.Context, sessionID, id string) error {
	var out api.StartResponse
	return c.call(ctx, http.MethodDelete, jobPath(id, sessionID, ""), nil, &out)
}

// Declarations lists the declared DSH_* keys.
func (c *Client) Declarations(ctx context.Context) ([]api.Declaration, error) {
	var out api.DeclarationsResponse
	if err := c.call(ctx, http.MethodGet, "/v1/env", nil, &out); err != nil {
		return nil, err
	}
	return out.Declarations, nil
}

// Snapshot returns the DSH_* snapshot a call of the session would get now
// (h nil: a call with no agent), as sorted KEY=VALUE.
func (c *Client) Snapshot(ctx context.Context, h *session.Header) ([]string, error) {
	var out api.SnapshotResponse
	if err := c.call(ctx, http.MethodPost, "/v1/snapshot", api.SessionRequest{Session: h}, &out); err != nil {
		return nil, err
	}
	return out.Env, nil
}

// Locate returns where the session's transcript lives; ok is false when
// the service's store has no per-session local file.
func (c *Client) Locate(ctx context.Context, h session.Header) (loc persistence.Location, ok bool, err error) {
	var out api.LocateResponse
	if err := c.call(ctx, http.MethodPost, "/v1/locate", api.SessionRequest{Session: &h}, &out); err != nil {
		return persistence.Location{}, false, err
	}
	if out.Location == nil {
		return persistence.Location{}, false, nil
	}
	return *out.Location, true, nil
}

// Health returns nil when the service answers its health check.
func (c *Client) Health(ctx context.Context) error {
	var out api.HealthResponse
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
func (c *Client) Calls(ctx context.Context) ([]api.CallInfo, error) {
	var out api.CallsResponse
	if err := c.call(ctx, http.MethodGet, "/v1/calls", nil, &out); err != nil {
		return nil, err
	}
	return out.Calls, nil
}

// CancelCall cancels one of this client's executions by its execution id
// and waits until it has ended.
func (c *Client) CancelCall(ctx context.Context, id string) error {
	var out api.StartResponse
	return c.call(ctx, http.MethodDelete, "/v1/calls/"+url.PathEscape(id), nil, &out)
}
