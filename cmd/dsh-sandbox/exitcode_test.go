package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// fakeService answers every request with status and body (a Retry-After
// of an hour on a 429, which the client does not wait for) and counts them.
func fakeService(t *testing.T, status int, body string, n *atomic.Int32) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "3600")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestExecServerRefusalsExit125Case(t *testing.T) {
	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"unauthorized", http.StatusUnauthorized, `{"error":{"class":"unauthorized","message":"unauthorized: missing or wrong bearer token"}}`, "refused the credentials"},
		{"forbidden", http.StatusForbidden, `{"error":{"class":"forbidden","field":"session.cwd","message":"session.cwd: outside the client's workspace roots"}}`, "refused this client"},
		{"overloaded", http.StatusTooManyRequests, `{"error":{"class":"overloaded","message":"overloaded: 4 executions running"}}`, "overloaded"},
		{"unavailable", http.StatusServiceUnavailable, `{"error":{"class":"unavailable","message":"backend docker: daemon does not answer"}}`, "unreachable or cannot run"},
		{"no error body", http.StatusUnauthorized, `not json`, "refused the credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			url := fakeService(t, tt.status, tt.body, &n)
			for _, extra := range [][]string{nil, {"--json"}} {
				args := append([]string{"exec", "--cwd", t.TempDir(), "--server", url}, extra...)
				_, errOut, code := run(t, append(args, "--", "true")...)
				if code != 125 {
					t.Errorf("%v: exit %d (%q), want 125", extra, code, errOut)
				}
				if !strings.Contains(errOut, tt.want) || !strings.Contains(errOut, "nothing ran") {
					t.Errorf("%v: stderr %q lacks %q and \"nothing ran\"", extra, errOut, tt.want)
				}
			}
			if n.Load() != 2 {
				t.Errorf("the service got %d requests, want 2 (one per exec, no retry)", n.Load())
			}
		})
	}
}

func TestExecServerUnreachableExit125(t *testing.T) {
	sock := "unix://" + filepath.Join(t.TempDir(), "none.sock")
	_, errOut, code := run(t, "exec", "--cwd", t.TempDir(), "--server", sock, "--", "true")
	if code != 125 || !strings.Contains(errOut, "unreachable") {
		t.Errorf("exec --server to a missing socket: exit %d (%q), want 125 naming it unreachable", code, errOut)
	}
}

func TestExecServerCallThatRanKeepsItsCodes(t *testing.T) {
	// The legitimate variants: a call that ran exits with its own code; a
	// request the service finds invalid is a usage error (2), not 125.
	var n atomic.Int32
	url := fakeService(t, http.StatusOK, `{"executionId":"x1","result":{"exitCode":3}}`, &n)
	if _, errOut, code := run(t, "exec", "--json", "--cwd", t.TempDir(), "--server", url, "--", "exit 3"); code != 3 {
		t.Errorf("a call that exited 3: exit %d (%q)", code, errOut)
	}
	url = fakeService(t, http.StatusBadRequest, `{"error":{"class":"invalid","field":"policy","message":"policy: \"nope\" is not a policy this service knows"}}`, &n)
	if _, errOut, code := run(t, "exec", "--json", "--cwd", t.TempDir(), "--server", url, "--", "true"); code != 2 || !strings.Contains(errOut, "policy") {
		t.Errorf("an invalid request: exit %d (%q), want 2 naming the field", code, errOut)
	}
}

// TestExecServerSendsPolicyName: exec --server sends --policy NAME as it
// is, for the service to resolve (a policy only the service knows works);
// a policy FILE is refused naming the flag, and nothing is sent.
func TestExecServerSendsPolicyName(t *testing.T) {
	var got []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			Policy string `json:"policy"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("the service got a body it cannot read: %v", err)
		}
		mu.Lock()
		got = append(got, body.Policy)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"executionId":"x1","result":{"exitCode":0}}`)
	}))
	t.Cleanup(srv.Close)
	for _, name := range []string{"only-the-service-knows", "read-only"} {
		if _, errOut, code := run(t, "exec", "--json", "--cwd", t.TempDir(), "--server", srv.URL, "--policy", name, "--", "true"); code != 0 {
			t.Errorf("exec --server --policy %s: exit %d (%q), want 0", name, code, errOut)
		}
	}
	file := filepath.Join(t.TempDir(), "mine.yaml")
	_, errOut, code := run(t, "exec", "--cwd", t.TempDir(), "--server", srv.URL, "--policy", file, "--", "true")
	if code != 2 || !strings.Contains(errOut, "--policy") || !strings.Contains(errOut, "policy file") {
		t.Errorf("exec --server --policy FILE: exit %d (%q), want 2 naming --policy as a file", code, errOut)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(got, []string{"only-the-service-knows", "read-only"}) {
		t.Errorf("the service got policies %q, want the two names as given and no request for the file", got)
	}
}
