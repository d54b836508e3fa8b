package api_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api/apitest"
	"github.com/dsh-sandbox/dsh-sandbox/api/client"
)

// contract checks every answer the tests' clients receive against
// api/openapi.yaml.
var contract *apitest.Validator

// minChecked is the fewest answers a whole run of the package checks.
const minChecked = 100

func TestMain(m *testing.M) {
	var err error
	if contract, err = apitest.New(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	if f := flag.Lookup("test.run"); code == 0 && f != nil && f.Value.String() == "" {
		fmt.Fprintf(os.Stderr, "api: %d answers checked against api/openapi.yaml:\n%s", contract.Total(), contract.Summary())
		if contract.Total() < minChecked {
			fmt.Fprintf(os.Stderr, "FAIL: only %d answers checked against api/openapi.yaml, want at least %d\n", contract.Total(), minChecked)
			code = 1
		}
	}
	os.Exit(code)
}

func dialUnix(ctx context.Context, sock string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", sock)
}

// httpClient is a raw HTTP client of the service socket whose answers
// contract checks for t.
func httpClient(t testing.TB, sock string) *http.Client {
	return contract.Client(t, &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return dialUnix(ctx, sock)
	}})
}

// checked are client options whose answers contract checks for t.
func checked(t testing.TB, opts client.Options) client.Options {
	opts.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return contract.Wrap(t, rt) }
	return opts
}
