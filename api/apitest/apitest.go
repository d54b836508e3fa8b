// Package apitest checks the service's live answers against its contract,
// api/openapi.yaml, with kin-openapi: a Validator wraps the transport of a
// test's API clients and fails the test on any answer (status, headers,
// body, error bodies and NDJSON events included) the contract does not
// describe. Only tests import it (the service tests in api and the
// integration suite), so kin-openapi is never linked into the binary.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
)

// maxCaptureBytes bounds the body of one answer the validator keeps; a
// larger answer fails the test instead of being half checked.
const maxCaptureBytes = 256 << 20

func init() {
	// NDJSON: every line is one value of the operation's schema. The
	// decoder checks all lines but the last itself; kin-openapi checks
	// the last one it returns.
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", ndjsonDecoder)
	// The contract serves itself as YAML text, a string.
	openapi3filter.RegisterBodyDecoder("application/yaml", openapi3filter.PlainBodyDecoder)
}

func ndjsonDecoder(body io.Reader, _ http.Header, schema *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	data, err := io.ReadAll(body)
	if err != nil {
		return nil, err
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	var last any
	for i, line := range lines {
		var v any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			return nil, fmt.Errorf("NDJSON line %d: %v", i+1, err)
		}
		if i < len(lines)-1 {
			if err := schema.Value.VisitJSON(v, openapi3.MultiErrors()); err != nil {
				return nil, fmt.Errorf("NDJSON line %d: %v", i+1, err)
			}
		}
		last = v
	}
	return last, nil
}

// Validator checks answers against api/openapi.yaml and counts the ones
// it checked, by operation and status. It is safe for concurrent use.
type Validator struct {
	router routers.Router
	errors *openapi3.Schema

	mu     sync.Mutex
	counts map[string]int
}

// New loads the contract the service serves (api.OpenAPI).
func New() (*Validator, error) {
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("api/openapi.yaml: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("api/openapi.yaml: %w", err)
	}
	// Route by method and path only: the service answers on any host
	// (a Unix socket, any tcp:// address).
	doc.Servers = nil
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, err
	}
	ref := doc.Components.Schemas["ErrorResponse"]
	if ref == nil || ref.Value == nil {
		return nil, fmt.Errorf("api/openapi.yaml: no ErrorResponse schema")
	}
	return &Validator{router: router, errors: ref.Value, counts: map[string]int{}}, nil
}

// Counts returns how many answers were checked, by "METHOD /path/template
// STATUS".
func (v *Validator) Counts() map[string]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(v.counts)
}

// Total is the number of answers checked.
func (v *Validator) Total() int {
	n := 0
	for _, c := range v.Counts() {
		n += c
	}
	return n
}

// Summary lists Counts one per line, sorted.
func (v *Validator) Summary() string {
	c := v.Counts()
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(c)) {
		fmt.Fprintf(&b, "%6d  %s\n", c[k], k)
	}
	return b.String()
}

// Wrap returns a transport that sends through base (http.DefaultTransport
// when nil) and checks every answer once its body has been read to the
// end or closed; t fails on an answer the contract does not describe.
func (v *Validator) Wrap(t testing.TB, base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{v: v, t: t, base: base}
}

// Client is an *http.Client over base whose answers v checks.
func (v *Validator) Client(t testing.TB, base http.RoundTripper) *http.Client {
	return &http.Client{Transport: v.Wrap(t, base)}
}

type transport struct {
	v    *Validator
	t    testing.TB
	base http.RoundTripper
}

func (tr *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := tr.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	resp.Body = &checkedBody{rc: resp.Body, check: func(body []byte, complete bool) {
		if err := tr.v.check(req, resp, body, complete); err != nil {
			tr.t.Errorf("%s %s answered %d outside api/openapi.yaml: %v", req.Method, req.URL.Path, resp.StatusCode, err)
		}
	}}
	return resp, nil
}

// checkedBody keeps what is read of a body and checks it at its end or
// when it is closed.
type checkedBody struct {
	rc    io.ReadCloser
	buf   bytes.Buffer
	over  bool
	done  bool
	check func(body []byte, complete bool)
	once  sync.Once
}

func (b *checkedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if b.buf.Len()+n > maxCaptureBytes {
		b.over = true
	} else {
		b.buf.Write(p[:n])
	}
	if err == io.EOF {
		b.done = true
		b.finish()
	}
	return n, err
}

func (b *checkedBody) Close() error {
	if !b.done {
		// What the reader left (a JSON decoder stops before the final
		// newline) is read now, within the bound; a stream cut short is
		// checked as far as its last whole line.
		n, err := io.Copy(&b.buf, io.LimitReader(b.rc, maxCaptureBytes-int64(b.buf.Len())+1))
		b.over = b.over || b.buf.Len() > maxCaptureBytes
		b.done = err == nil && n <= maxCaptureBytes
	}
	b.finish()
	return b.rc.Close()
}

func (b *checkedBody) finish() {
	b.once.Do(func() {
		if b.over {
			b.check(nil, false)
			return
		}
		b.check(b.buf.Bytes(), b.done)
	})
}

// check validates one answer to req with the given body (complete: read
// to its end) and counts it.
func (v *Validator) check(req *http.Request, resp *http.Response, body []byte, complete bool) error {
	if body == nil {
		return fmt.Errorf("body larger than %d bytes: not checked", maxCaptureBytes)
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if !complete && ct == "application/x-ndjson" {
		if i := bytes.LastIndexByte(body, '\n'); i >= 0 {
			body = body[:i+1]
		} else {
			body = nil
		}
	}
	route, params, err := v.router.FindRoute(req)
	if err != nil {
		// A method the path does not answer, or no such path: the error
		// body, and for 405 the Allow header.
		key := req.Method + " " + req.URL.Path + " " + fmt.Sprint(resp.StatusCode)
		if err := v.unrouted(resp, body); err != nil {
			return fmt.Errorf("no operation (%v) and %v", routeError(err), err)
		}
		v.count(key)
		return nil
	}
	if !complete && (ct != "application/x-ndjson" || len(body) == 0) {
		// The connection ended early (a cancelled call, a killed
		// service): nothing whole to check.
		v.count(req.Method + " " + route.Path + " " + fmt.Sprint(resp.StatusCode) + " (cut short)")
		return nil
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(body)),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	if err := openapi3filter.ValidateResponse(req.Context(), in); err != nil {
		return err
	}
	v.count(req.Method + " " + route.Path + " " + fmt.Sprint(resp.StatusCode))
	return nil
}

func routeError(err error) string {
	if err == routers.ErrMethodNotAllowed {
		return "method not allowed"
	}
	return err.Error()
}

// unrouted checks an answer to a request no operation describes: 404 or
// 405 (with an Allow header), with the contract's error body.
func (v *Validator) unrouted(resp *http.Response, body []byte) error {
	var class string
	switch resp.StatusCode {
	case http.StatusNotFound:
		class = "not_found"
	case http.StatusMethodNotAllowed:
		class = "method_not_allowed"
		if resp.Header.Get("Allow") == "" {
			return fmt.Errorf("405 without an Allow header")
		}
	default:
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("error body: %v", err)
	}
	if err := v.errors.VisitJSON(doc, openapi3.MultiErrors()); err != nil {
		return fmt.Errorf("error body: %v", err)
	}
	var e types.ErrorResponse
	if err := json.Unmarshal(body, &e); err != nil || e.Error.Class != class {
		return fmt.Errorf("error class %q, want %q", e.Error.Class, class)
	}
	return nil
}

func (v *Validator) count(key string) {
	v.mu.Lock()
	v.counts[key]++
	v.mu.Unlock()
}
