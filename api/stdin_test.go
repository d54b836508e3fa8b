package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// hashStdin is the fake executor's "hash-stdin": it reads the whole
// stdin and prints its length and sha256, as `wc -c; sha256sum` would.
func hashStdin(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	h := sha256.New()
	var n int64
	if in := req.StdinSource(); in != nil {
		var err error
		if n, err = io.Copy(h, in); err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInternal, "reading stdin: %v", err)
		}
	}
	if ctx.Err() != nil {
		return &sandbox.Result{Aborted: true, Signal: "SIGKILL"}, nil
	}
	out := fmt.Sprintf("%d %x\n", n, h.Sum(nil))
	if req.Stdout != nil {
		io.WriteString(req.Stdout, out)
	}
	zero := 0
	return &sandbox.Result{ExitCode: &zero, Stdout: sandbox.Stream{Text: out}, Sandbox: sandbox.Info{Backend: "fake", Policy: req.Policy.Name}}, nil
}

// randomBytes is n seeded pseudo-random bytes (every byte value) and the
// "LENGTH SHA256" line hash-stdin prints for them.
func randomBytes(n int) ([]byte, string) {
	data := make([]byte, n)
	_, _ = rand.NewChaCha8([32]byte{'i', 'n'}).Read(data)
	sum := sha256.Sum256(data)
	return data, fmt.Sprintf("%d %s\n", n, hex.EncodeToString(sum[:]))
}

// TestServerRunStreamsStdin: a multipart stdin part reaches the command
// byte for byte, larger than the JSON body bound; no stdin part is an
// empty stdin; past MaxStdinBytes the call is stopped with 413 naming
// stdin; an inline stdin together with a part, and stdinOpen on a run,
// are refused naming the field.
func TestServerRunStreamsStdin(t *testing.T) {
	f := newFixture(t, &fakeExec{}, func(o *api.Options) { o.MaxStdinBytes = 4 << 20 })
	ctx := context.Background()
	rr := types.RunRequest{Policy: policy.WorkspaceWrite, Command: "hash-stdin", Cwd: f.work}

	data, want := randomBytes(3 << 20) // three times the body bound
	var out bytes.Buffer
	resp, err := f.cl.StreamStdin(ctx, rr, bytes.NewReader(data), &out, nil)
	if err != nil || out.String() != want || resp.Result.Stdout.Text != want {
		t.Fatalf("StreamStdin(3 MiB) = %q, %+v, %v; want %q", out.String(), resp, err, want)
	}
	if resp, err := f.cl.StreamStdin(ctx, rr, nil, nil, nil); err != nil || resp.Result.Stdout.Text != "0 "+hex.EncodeToString(sha256.New().Sum(nil))+"\n" {
		t.Errorf("StreamStdin(no part) = %+v, %v; want an empty stdin", resp, err)
	}
	small, wantSmall := randomBytes(1000)
	if resp, err := f.cl.Run(ctx, types.RunRequest{Policy: policy.WorkspaceWrite, Command: "hash-stdin", Cwd: f.work, Stdin: small}); err != nil || resp.Result.Stdout.Text != wantSmall {
		t.Errorf("Run(inline stdin) = %+v, %v; want %q", resp, err, wantSmall)
	}

	// The client keeps the class (invalid) and field; the status is
	// the contract check's count.
	over, _ := randomBytes(4<<20 + 1)
	before := contract.Counts()["POST /v1/run 413"]
	_, err = f.cl.StreamStdin(ctx, rr, bytes.NewReader(over), nil, nil)
	if !errors.Is(err, sandbox.ErrInvalid) || fieldOf(err) != "stdin" || contract.Counts()["POST /v1/run 413"] != before+1 {
		t.Errorf("StreamStdin(bound + 1) = %v (field %q); want a 413 naming stdin", err, fieldOf(err))
	}
	inline := rr
	inline.Stdin = []byte("x")
	if _, err := f.cl.StreamStdin(ctx, inline, strings.NewReader("y"), nil, nil); fieldOf(err) != "stdin" {
		t.Errorf("StreamStdin with inline stdin too = %v; want 400 naming stdin", err)
	}
	// A refused request answers with its own error, not a broken upload.
	bad := rr
	bad.Policy = "nope"
	if _, err := f.cl.StreamStdin(ctx, bad, bytes.NewReader(data), nil, nil); fieldOf(err) != "policy" {
		t.Errorf("StreamStdin(3 MiB, unknown policy) = %v; want 400 naming policy", err)
	}
	open := rr
	open.StdinOpen = true
	if _, err := f.cl.Run(ctx, open); fieldOf(err) != "stdinOpen" {
		t.Errorf("Run with stdinOpen = %v; want 400 naming stdinOpen", err)
	}
}

// TestServerJobStdin: a job started with stdinOpen reads what
// WriteJobStdin sends, in order, until a write closes it; only its
// client reaches it; a job without stdinOpen, a closed stdin and a write
// past the bound are refused.
func TestServerJobStdin(t *testing.T) {
	f := newFixture(t, &fakeExec{}, func(o *api.Options) { o.MaxStdinBytes = 2 << 20 })
	_, cls := serveTokens(t, f, []api.TokenClient{{Name: "a", Token: "tok-a"}, {Name: "b", Token: "tok-b"}})
	a, b := cls["a"], cls["b"]
	ctx := context.Background()
	rr := types.RunRequest{Session: header("s1", f.work), Policy: policy.WorkspaceWrite, Command: "hash-stdin", StdinOpen: true}
	id, err := a.StartJob(ctx, rr)
	if err != nil {
		t.Fatal(err)
	}
	data, want := randomBytes(1<<20 + 7)
	if got, err := b.WriteJobStdin(ctx, "s1", id, bytes.NewReader(data), true); api.HTTPStatus(err) != http.StatusNotFound {
		t.Errorf("client b: WriteJobStdin(a's job) = %+v, %v; want 404", got, err)
	}
	half := len(data) / 2
	if got, err := a.WriteJobStdin(ctx, "s1", id, bytes.NewReader(data[:half]), false); err != nil || got.Written != int64(half) || got.Closed {
		t.Fatalf("WriteJobStdin(first half) = %+v, %v; want %d written, open", got, err, half)
	}
	if got, err := a.WriteJobStdin(ctx, "s1", id, bytes.NewReader(data[half:]), true); err != nil || got.Written != int64(len(data)-half) || !got.Closed {
		t.Fatalf("WriteJobStdin(second half, close) = %+v, %v; want %d written, closed", got, err, len(data)-half)
	}
	if out := waitJob(t, a, "s1", id); out.Stdout != want {
		t.Errorf("job stdout = %q, want %q", out.Stdout, want)
	}
	if _, err := a.WriteJobStdin(ctx, "s1", id, strings.NewReader("late"), false); fieldOf(err) != "stdin" {
		t.Errorf("WriteJobStdin after close = %v; want 400 naming stdin", err)
	}
	if _, err := a.WriteJobStdin(ctx, "s1", "bash-0000000000000000", strings.NewReader("x"), false); api.HTTPStatus(err) != http.StatusNotFound {
		t.Errorf("WriteJobStdin(unknown job) = %v; want 404", err)
	}

	closedID, err := a.StartJob(ctx, types.RunRequest{Session: header("s1", f.work), Policy: policy.WorkspaceWrite, Command: "hash-stdin"})
	if err != nil {
		t.Fatal(err)
	}
	waitJob(t, a, "s1", closedID)
	if _, err := a.WriteJobStdin(ctx, "s1", closedID, strings.NewReader("x"), false); fieldOf(err) != "stdin" {
		t.Errorf("WriteJobStdin(job without stdinOpen) = %v; want 400 naming stdin", err)
	}

	bigID, err := a.StartJob(ctx, rr)
	if err != nil {
		t.Fatal(err)
	}
	over, _ := randomBytes(2<<20 + 1)
	before := contract.Counts()["POST /v1/jobs/{id}/stdin 413"]
	got, err := a.WriteJobStdin(ctx, "s1", bigID, bytes.NewReader(over), false)
	if fieldOf(err) != "stdin" || contract.Counts()["POST /v1/jobs/{id}/stdin 413"] != before+1 {
		t.Errorf("WriteJobStdin(bound + 1) = %+v, %v; want 413 naming stdin", got, err)
	}
	if out := waitJob(t, a, "s1", bigID); !strings.HasPrefix(out.Stdout, fmt.Sprint(2<<20)+" ") {
		t.Errorf("job past the bound read %q, want exactly the bound and EOF", out.Stdout)
	}
}

// waitJob reads a job's output until it is done (10 s at most) and
// returns it all.
func waitJob(t *testing.T, cl interface {
	JobOutput(context.Context, string, string) (sandbox.JobOutput, error)
}, session, id string) sandbox.JobOutput {
	t.Helper()
	var all sandbox.JobOutput
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		o, err := cl.JobOutput(context.Background(), session, id)
		if err != nil {
			t.Fatalf("JobOutput(%s) = %v", id, err)
		}
		all.Stdout += o.Stdout
		all.Done, all.Result = o.Done, o.Result
		if o.Done {
			return all
		}
	}
	t.Fatalf("job %s not done after 10 s", id)
	return all
}

// TestServerWrongMethodIs405: a known path asked with another method is
// 405 with the methods it answers in Allow and the API's error body; an
// unknown path stays 404.
func TestServerWrongMethodIs405(t *testing.T) {
	f := newFixture(t, &fakeExec{}, nil)
	hc := httpClient(t, f.sock)
	cases := []struct{ method, path, allow string }{
		{http.MethodDelete, "/v1/health", "GET, HEAD"},
		{http.MethodGet, "/v1/run", "POST"},
		{http.MethodPut, "/v1/jobs/bash-1", "GET, HEAD, DELETE"},
		{http.MethodGet, "/v1/jobs/bash-1/stdin", "POST"},
		{http.MethodPost, "/v1/calls", "GET, HEAD"},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, "http://x"+tc.path, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tc.allow || !strings.Contains(string(data), `"class":"method_not_allowed"`) {
			t.Errorf("%s %s = %d, Allow %q, %s; want 405, Allow %q and the error body", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), data, tc.allow)
		}
	}
	resp, err := hc.Get("http://x/v1/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Allow") != "" {
		t.Errorf("GET /v1/nope = %d (Allow %q), want 404 without Allow", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// stdinByteExec reads one byte of a job's stdin, says so on got, and
// runs until it is killed.
type stdinByteExec struct{ got chan struct{} }

func (e stdinByteExec) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	var one [1]byte
	if _, err := io.ReadFull(req.StdinSource(), one[:]); err != nil {
		return nil, sandbox.Errorf(sandbox.ErrInternal, "reading stdin: %v", err)
	}
	e.got <- struct{}{}
	<-ctx.Done()
	return &sandbox.Result{Aborted: true, Signal: "SIGKILL"}, nil
}

// TestServerJobStdinStuckWriterEnds: a client that began a stdin write
// and then sends nothing gets its answer when the job ends (its body read
// is interrupted), instead of holding the request open.
func TestServerJobStdinStuckWriterEnds(t *testing.T) {
	exec := stdinByteExec{got: make(chan struct{}, 1)}
	f := newFixture(t, &fakeExec{}, func(o *api.Options) { o.Executor = exec })
	ctx := context.Background()
	id, err := f.cl.StartJob(ctx, types.RunRequest{Session: header("s1", f.work), Policy: policy.WorkspaceWrite, Command: "read", StdinOpen: true})
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	t.Cleanup(func() { pw.Close() })
	type answer struct {
		resp types.StdinResponse
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := f.cl.WriteJobStdin(ctx, "s1", id, pr, false)
		done <- answer{resp, err}
	}()
	if _, err := pw.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	<-exec.got // the write is in progress, its body now silent
	if err := f.cl.KillJob(ctx, "s1", id); err != nil {
		t.Fatalf("KillJob = %v", err)
	}
	select {
	case a := <-done:
		if a.err != nil || !a.resp.Closed || a.resp.Written != 1 {
			t.Errorf("stuck WriteJobStdin after the job's end = %+v, %v; want 1 written, closed", a.resp, a.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a stdin write whose client sends nothing outlived the job")
	}
}
