//go:build integration

package integration

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api/apitest"
	"github.com/dsh-sandbox/dsh-sandbox/api/client"
)

// contract checks every answer the suite's API clients receive from the
// service against api/openapi.yaml (status, headers, body, error bodies,
// stream events); an answer it does not describe fails the test that got
// it.
var contract = func() *apitest.Validator {
	v, err := apitest.New()
	if err != nil {
		panic(err)
	}
	return v
}()

// minChecked is the fewest answers a whole run checks; contractOps are
// the operations it must have checked at least once.
const minChecked = 300

var contractOps = []string{
	"POST /v1/run", "POST /v1/jobs", "GET /v1/jobs", "GET /v1/jobs/{id}", "POST /v1/jobs/{id}/kill",
	"DELETE /v1/jobs/{id}", "POST /v1/jobs/{id}/stdin", "GET /v1/calls", "DELETE /v1/calls/{id}",
	"POST /v1/snapshot", "POST /v1/locate", "GET /v1/health", "GET /metrics",
}

// newClient is client.New whose answers contract checks for t.
func newClient(t testing.TB, addr string, opts client.Options) (*client.Client, error) {
	opts.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return contract.Wrap(t, rt) }
	return client.New(addr, opts)
}

// socketHTTP is a raw HTTP client of the service socket sock whose
// answers contract checks for t.
func socketHTTP(t testing.TB, sock string) *http.Client {
	return contract.Client(t, &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}})
}

// checkedSocket serves a proxy of the service socket sock on a socket of
// its own and returns that one's path: a CLI (exec --server) pointed at
// it gets the service's answers unchanged, and contract checks each for
// t. The proxy relays both ways at once, so a streamed stdin still
// overlaps the answer. Peers reach the service as the test process (a
// test of peer identity talks to the service directly).
func checkedSocket(t *testing.T, sock string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "checked.sock")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "dsh-sandbox"
		},
		Transport: contract.Wrap(t, &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}),
		FlushInterval: -1,
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		proxy.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return path
}

// checkContractCoverage prints what the run checked and, for a whole run
// as root (where the service tests run), turns a passing run into a
// failure when too little was checked: the checks would then be hollow.
func checkContractCoverage(code int) int {
	counts := contract.Counts()
	fmt.Fprintf(os.Stderr, "integration: %d answers checked against api/openapi.yaml\n%s", contract.Total(), contract.Summary())
	run := flag.Lookup("test.run")
	if code != 0 || os.Geteuid() != 0 || run == nil || run.Value.String() != "" {
		return code
	}
	if contract.Total() < minChecked {
		fmt.Fprintf(os.Stderr, "FAIL: only %d answers checked against api/openapi.yaml, want at least %d\n", contract.Total(), minChecked)
		code = 1
	}
	for _, op := range contractOps {
		seen := false
		for key := range counts {
			seen = seen || strings.HasPrefix(key, op+" ")
		}
		if !seen {
			fmt.Fprintf(os.Stderr, "FAIL: no answer of %s was checked against api/openapi.yaml\n", op)
			code = 1
		}
	}
	return code
}
