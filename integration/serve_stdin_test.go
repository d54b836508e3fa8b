//go:build integration

package integration

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
)

// TestServeExecStdin100MB: 100 MB of binary data through `exec --server
// -i` reach the command byte for byte (the hash inside matches): the CLI
// streams it to the service as a multipart stdin part and the service
// into the container (through a proxy that checks the answers against
// the contract). A piped stdin read whole (8 MiB, past the JSON
// body's 1 MiB) goes the same way.
func TestServeExecStdin100MB(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	sv := startServe(t, e)
	base := append([]string{"exec", "--server", "unix://" + checkedSocket(t, sv.sock)}, e.flags("s1")...)

	data, want := binaryData(100 << 20)
	r := runStdin(t, bytes.NewReader(data), append(base, "-i", "--", "sha256sum")...)
	if r.code != 0 || firstField(r.stdout) != want {
		t.Fatalf("100 MB through exec --server -i -- sha256sum = %d, %q (stderr %q); want %s", r.code, r.stdout, r.stderr, want)
	}
	piped, wantPiped := binaryData(8 << 20)
	r = runStdin(t, bytes.NewReader(piped), append(base, "--", "cat | sha256sum")...)
	if r.code != 0 || firstField(r.stdout) != wantPiped {
		t.Errorf("8 MiB piped through exec --server -- 'cat | sha256sum' = %d, %q (stderr %q); want %s", r.code, r.stdout, r.stderr, wantPiped)
	}
	// A command that stops reading ends the call while stdin goes on.
	r = runStdin(t, io.MultiReader(strings.NewReader("first line\n"), bytes.NewReader(data)), append(base, "-i", "--", "head -n1")...)
	if r.code != 0 || r.stdout != "first line\n" {
		t.Errorf("exec --server -i -- 'head -n1' = %d, %q (stderr %q); want first line", r.code, r.stdout, r.stderr)
	}
}

// TestServeMaxStdin: serve --max-stdin bounds what one call streams: 2
// MiB through exec --server -i into a service started with 1Mi is
// refused (the call is stopped, nothing reports success), while 512 KiB
// passes byte for byte.
func TestServeMaxStdin(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	sv := startServe(t, e, "--max-stdin", "1Mi")
	base := append([]string{"exec", "--server", "unix://" + checkedSocket(t, sv.sock)}, e.flags("s1")...)
	small, want := binaryData(512 << 10)
	if r := runStdin(t, bytes.NewReader(small), append(base, "-i", "--", "sha256sum")...); r.code != 0 || firstField(r.stdout) != want {
		t.Errorf("512 KiB under --max-stdin 1Mi = %d, %q (stderr %q); want %s", r.code, r.stdout, r.stderr, want)
	}
	big, _ := binaryData(2 << 20)
	r := runStdin(t, bytes.NewReader(big), append(base, "-i", "--", "sha256sum")...)
	if r.code == 0 || !strings.Contains(r.stderr, "stdin") {
		t.Errorf("2 MiB under --max-stdin 1Mi = %d, %q (stderr %q); want a failure naming stdin", r.code, r.stdout, r.stderr)
	}
	if r := run(t, nil, append([]string{"serve", "--max-stdin", "lots"}, e.flags("")...)...); r.code != 2 || !strings.Contains(r.stderr, "--max-stdin") {
		t.Errorf("serve --max-stdin lots = %d, %q; want 2 naming --max-stdin", r.code, r.stderr)
	}
}

// TestServeJobStdin: a background job started with stdinOpen reads the
// binary chunks POST /v1/jobs/{id}/stdin sends, in order, until the last
// write closes its stdin; another client cannot write into it.
func TestServeJobStdin(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	sv := startServe(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := e.header("s1")
	id, err := sv.cl.StartJob(ctx, types.RunRequest{Session: h, Policy: "workspace-write", Command: "sha256sum; echo done", StdinOpen: true})
	if err != nil {
		t.Fatalf("StartJob(stdinOpen) = %v", err)
	}
	data, want := binaryData(16 << 20)
	const chunks = 4
	for i := range chunks {
		part := data[i*len(data)/chunks : (i+1)*len(data)/chunks]
		got, err := sv.cl.WriteJobStdin(ctx, "s1", id, bytes.NewReader(part), i == chunks-1)
		if err != nil || got.Written != int64(len(part)) || got.Closed != (i == chunks-1) {
			t.Fatalf("WriteJobStdin(chunk %d) = %+v, %v; want %d written", i, got, err, len(part))
		}
	}
	out := jobStdoutUntil(t, sv.cl, "s1", id, "done")
	if firstField(out) != want {
		t.Errorf("job sha256sum of 16 MiB in %d writes = %q, want %s", chunks, out, want)
	}
}

// TestServeWrongMethodIs405: the real service answers a known path asked
// with another method 405 with an Allow header and the API's error body.
func TestServeWrongMethodIs405(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	sv := startServe(t, e)
	hc := socketHTTP(t, sv.sock)
	req, _ := http.NewRequest(http.MethodDelete, "http://x/v1/health", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" || !strings.Contains(string(body), `"class":"method_not_allowed"`) {
		t.Errorf("DELETE /v1/health = %d, Allow %q, %s; want 405, Allow GET, HEAD and the error body", resp.StatusCode, resp.Header.Get("Allow"), body)
	}
}
