package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// overloaded answers the first n requests 429 with Retry-After retryAfter
// (none when empty), then serves ok; it records every body it got.
type overloaded struct {
	mu         sync.Mutex
	n          int
	retryAfter string
	bodies     []string
	ok         func(w http.ResponseWriter)
}

func (o *overloaded) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	data, _ := io.ReadAll(r.Body)
	o.mu.Lock()
	o.bodies = append(o.bodies, string(data))
	busy := len(o.bodies) <= o.n
	o.mu.Unlock()
	if busy {
		if o.retryAfter != "" {
			w.Header().Set("Retry-After", o.retryAfter)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"error":{"class":"overloaded","message":"overloaded: 4 executions running"}}`)
		return
	}
	o.ok(w)
}

func (o *overloaded) attempts() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.bodies)
}

func healthy(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	io.WriteString(w, `{"status":"ok"}`)
}

func newTestClient(t *testing.T, h http.Handler, opts Options) *Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, opts)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRetriesOverloadedThenSucceeds(t *testing.T) {
	o := &overloaded{n: 2, retryAfter: "0", ok: func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"executionId":"x1","result":{"exitCode":0}}`)
	}}
	c := newTestClient(t, o, Options{RetryFor: DefaultRetryFor})
	resp, err := c.Run(context.Background(), types.RunRequest{Policy: "read-only", Command: "true"})
	if err != nil {
		t.Fatalf("Run after two 429s: %v", err)
	}
	if resp.ExecutionID != "x1" {
		t.Errorf("execution id %q, want x1", resp.ExecutionID)
	}
	if got := o.attempts(); got != 3 {
		t.Fatalf("%d attempts, want 3 (two 429s, then 200)", got)
	}
	// Every attempt carries the whole body again.
	for i, b := range o.bodies {
		if b != o.bodies[0] || b == "" {
			t.Errorf("attempt %d sent body %q, the first %q", i, b, o.bodies[0])
		}
	}
}

func TestNoRetryByDefault(t *testing.T) {
	o := &overloaded{n: 1, retryAfter: "0", ok: healthy}
	c := newTestClient(t, o, Options{})
	err := c.Health(context.Background())
	if !errors.Is(err, types.ErrOverloaded) {
		t.Fatalf("Health without RetryFor: %v, want ErrOverloaded", err)
	}
	if got := o.attempts(); got != 1 {
		t.Errorf("%d attempts, want 1", got)
	}
	// The legitimate variant: with retries, the same service answers.
	o2 := &overloaded{n: 1, retryAfter: "0", ok: healthy}
	if err := newTestClient(t, o2, Options{RetryFor: DefaultRetryFor}).Health(context.Background()); err != nil {
		t.Errorf("Health with retries: %v", err)
	}
}

func TestRetryAfterBeyondBoundIsNotWaitedFor(t *testing.T) {
	o := &overloaded{n: 1, retryAfter: "3600", ok: healthy}
	c := newTestClient(t, o, Options{RetryFor: DefaultRetryFor})
	if err := c.Health(context.Background()); !errors.Is(err, types.ErrOverloaded) {
		t.Fatalf("Health: %v, want ErrOverloaded", err)
	}
	if got := o.attempts(); got != 1 {
		t.Errorf("%d attempts, want 1: a Retry-After of an hour is not waited for", got)
	}
}

func TestRetryStopsAtContextDeadline(t *testing.T) {
	o := &overloaded{n: 1, retryAfter: "5", ok: healthy}
	c := newTestClient(t, o, Options{RetryFor: DefaultRetryFor})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := c.Health(ctx)
	if !errors.Is(err, types.ErrOverloaded) {
		t.Fatalf("Health: %v, want ErrOverloaded (the wait would outlast the context)", err)
	}
	if ctx.Err() != nil {
		t.Errorf("Health waited until the context ended instead of giving up at once")
	}
	if got := o.attempts(); got != 1 {
		t.Errorf("%d attempts, want 1", got)
	}
}

func TestRetryAfterCancelledContext(t *testing.T) {
	o := &overloaded{n: 100, retryAfter: "1", ok: healthy}
	c := newTestClient(t, o, Options{RetryFor: DefaultRetryFor})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Health(ctx) }()
	for o.attempts() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, types.ErrOverloaded) {
		t.Fatalf("Health after cancel: %v, want the last 429 (ErrOverloaded)", err)
	}
}

func TestOtherErrorsAreNotRetried(t *testing.T) {
	for _, tc := range []struct {
		status int
		class  error
	}{
		{http.StatusUnauthorized, types.ErrUnauthorized},
		{http.StatusForbidden, types.ErrForbidden},
		{http.StatusServiceUnavailable, sandbox.ErrUnavailable},
	} {
		n := 0
		c := newTestClient(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			n++
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(tc.status) // no error body: the status decides
		}), Options{RetryFor: DefaultRetryFor})
		err := c.Health(context.Background())
		if !errors.Is(err, tc.class) {
			t.Errorf("status %d: %v, want class %v", tc.status, err, tc.class)
		}
		if n != 1 {
			t.Errorf("status %d: %d attempts, want 1", tc.status, n)
		}
	}
}

func TestUnreachableIsUnavailable(t *testing.T) {
	c, err := New("unix://"+t.TempDir()+"/none.sock", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Health(context.Background()); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Fatalf("Health of a missing socket: %v, want ErrUnavailable", err)
	}
}

func TestRetryWaitCase(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	far := now.Add(time.Minute)
	bg := context.Background()
	tests := []struct {
		name     string
		header   string
		deadline time.Time
		want     time.Duration
		retry    bool
	}{
		{"seconds", "3", far, 3 * time.Second, true},
		{"zero", "0", far, 0, true},
		{"absent", "", far, defaultRetryAfter, true},
		{"garbage", "soon", far, defaultRetryAfter, true},
		{"negative", "-4", far, defaultRetryAfter, true},
		{"http date", now.Add(4 * time.Second).Format(http.TimeFormat), far, 4 * time.Second, true},
		{"past date", now.Add(-time.Hour).Format(http.TimeFormat), far, 0, true},
		{"beyond bound", "11", far, 0, false},
		{"date beyond bound", now.Add(time.Hour).Format(http.TimeFormat), far, 0, false},
		{"after retry deadline", "5", now.Add(4 * time.Second), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, retry := retryWait(bg, tt.header, tt.deadline, now)
			if got != tt.want || retry != tt.retry {
				t.Errorf("retryWait(%q) = %v, %v; want %v, %v", tt.header, got, retry, tt.want, tt.retry)
			}
		})
	}
}
