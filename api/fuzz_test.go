package api_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// preparingExec does with a request what every backend does before a
// container exists, with the request's values: it plans the call's
// mounts (policy.Plan) and creates the transcript directory's name in a
// directory of its own. An error there that is not the request's fault
// answers 500, which the fuzz test below fails on.
type preparingExec struct{ dir string }

func (p preparingExec) Run(ctx context.Context, req *sandbox.Request) (*sandbox.Result, error) {
	if _, err := policy.Plan(req.Policy, req.Session, policy.Identity{}); err != nil {
		return nil, err
	}
	if td := req.Session.TranscriptDir; td != "" {
		if err := os.MkdirAll(filepath.Join(p.dir, filepath.Base(td)), 0o700); err != nil {
			return nil, sandbox.Errorf(sandbox.ErrInternal, "session dir: %v", err)
		}
	}
	zero := 0
	return &sandbox.Result{ExitCode: &zero}, nil
}

// fuzzRoutes are the routes that decode a request body.
var fuzzRoutes = []string{"/v1/run", "/v1/jobs", "/v1/snapshot", "/v1/locate"}

// FuzzServerRequest posts arbitrary bodies to every route that decodes
// one, on a server whose policies include one with mountRoots: no answer
// may be a 5xx (every malformed request is a 4xx naming its field), and
// the server must keep answering.
func FuzzServerRequest(f *testing.F) {
	roots := f.TempDir()
	fx := newFixture(f, &fakeExec{}, func(o *api.Options) {
		o.Executor = preparingExec{dir: f.TempDir()}
		p, _ := policy.Builtin(policy.WorkspaceWrite)
		p.Name, p.MountRoots = "roots", []sandbox.MountRoot{{Path: roots}}
		p, err := policy.Normalize(p)
		if err != nil {
			f.Fatal(err)
		}
		o.Policies[p.Name] = p
	})
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", fx.sock)
	}}}
	ws := fx.work
	for _, s := range []string{
		`{"policy":"workspace-write","command":"true","cwd":"` + ws + `"}`,
		`{"policy":"workspace-write","command":"true","session":{"type":"session","version":0,"id":"s1","createdAt":0,"cwd":"` + ws + `"}}`,
		`{"policy":"workspace-write","command":"true","session":{"type":"session","version":0,"id":"` + string(bytes.Repeat([]byte("a"), 300)) + `","createdAt":0,"cwd":"` + ws + `"}}`,
		`{"policy":"workspace-write","command":"true","session":{"type":"session","version":0,"id":"..","createdAt":0,"cwd":"` + ws + `"}}`,
		`{"policy":"roots","command":"true","cwd":"` + ws + `","mounts":[{"source":"` + roots + `","target":"/usr/bin"}]}`,
		`{"policy":"roots","command":"true","cwd":"` + ws + `","mounts":[{"source":"` + roots + `","target":"/mnt/r","readOnly":true}]}`,
		`{"policy":"roots","command":"true","cwd":"` + ws + `","mounts":[{"source":"` + roots + `","target":"` + ws + `/x"}]}`,
		`{"policy":"workspace-write","command":"true","cwd":"` + ws + `","workdir":"/nope","memoryBytes":1,"cpus":1e308,"pids":-1}`,
		`{"policy":"workspace-write","command":"true","cwd":"` + ws + `","dshEnv":{"DSH_SESSION_JSONL":"/x"},"env":["A=1"]}`,
		`{"session":{"type":"session","version":0,"id":"s1","createdAt":0}}`,
		`{"policy":"workspace-write","command":"true","stdinOpen":true,"cwd":"` + ws + `"}`,
		`[`, `null`, ``,
	} {
		for i := range fuzzRoutes {
			f.Add(uint8(i), s)
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, body string) {
		path := fuzzRoutes[int(route)%len(fuzzRoutes)]
		resp, err := hc.Post("http://x"+path, "application/json", bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatalf("POST %s %q: %v (the server stopped answering)", path, body, err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			t.Fatalf("POST %s %q = %d %s; want a 4xx naming the field", path, body, resp.StatusCode, answer)
		}
	})
}
