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
	"strings"

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
}

// Client talks to one service. It is safe for concurrent use.
type Client struct {
	base  string
	token string
	hc    *http.Client
}

// New returns a client of the service at addr: "unix:///path.sock",
// "tcp://host:port" or "http://host:port".
func New(addr string, opts Options) (*Client, error) {
	hc := opts.HTTPClient
	if hc == nil {
		hc = &http.Client{}
	}
	c := &Client{token: opts.Token, hc: hc}
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

func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInvalid, "request: %v", err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInvalid, "request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, sandbox.Errorf(sandbox.ErrUnavailable, "service: %w", err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

// decodeError turns an error answer into an error of the same class.
func decodeError(resp *http.Response) error {
	var e api.ErrorResponse
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(data, &e); err != nil || e.Error.Class == "" {
		return sandbox.Errorf(sandbox.ErrInternal, "service answered %s", resp.Status)
	}
	return e.Error.Err()
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
