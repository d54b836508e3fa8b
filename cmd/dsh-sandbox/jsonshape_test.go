package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/contributors"
	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/persistence"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	"github.com/dsh-sandbox/dsh-sandbox/session"
)

type noExecutor struct{}

func (noExecutor) Run(context.Context, *sandbox.Request) (*sandbox.Result, error) {
	return nil, sandbox.Errorf(sandbox.ErrUnavailable, "not in this test")
}

type noLocator struct{}

func (noLocator) Locate(session.Header) (persistence.Location, bool) {
	return persistence.Location{}, false
}

// serviceBody is the decoded body of method path on a service with home.
func serviceBody(t *testing.T, home, method, path, body string) any {
	t.Helper()
	reg := overlay.NewRegistry()
	if _, err := contributors.Install(reg, func() persistence.Locator { return noLocator{} }); err != nil {
		t.Fatal(err)
	}
	p, _ := policy.Builtin(policy.WorkspaceWrite)
	srv, err := api.NewServer(api.Options{Executor: noExecutor{}, Policies: map[string]sandbox.Policy{p.Name: p}, Registry: reg, Home: home})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("%s %s = %d %s", method, path, rec.Code, rec.Body)
	}
	return decodeAny(t, rec.Body.String())
}

func decodeAny(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("not JSON: %q: %v", s, err)
	}
	return v
}

// lowerCamel checks that every object key in v is lowerCamelCase.
func lowerCamel(t *testing.T, what string, v any) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if k == "" || k[0] < 'a' || k[0] > 'z' || strings.ContainsAny(k, "_- ") {
				t.Errorf("%s: key %q is not lowerCamelCase", what, k)
			}
			lowerCamel(t, what, e)
		}
	case []any:
		for _, e := range x {
			lowerCamel(t, what, e)
		}
	}
}

// TestJSONShapesMatchTheService: `env list --json` prints the body of GET
// /v1/env and `env show --json` that of POST /v1/snapshot, field for
// field, in lowerCamelCase.
func TestJSONShapesMatchTheService(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	out, errOut, code := run(t, "env", "list", "--json", "--home", home)
	if code != 0 {
		t.Fatalf("env list --json: exit %d: %s", code, errOut)
	}
	cli := decodeAny(t, out)
	svc := serviceBody(t, home, http.MethodGet, "/v1/env", "")
	if !reflect.DeepEqual(cli, svc) {
		t.Errorf("env list --json = %s\nGET /v1/env = %v", out, svc)
	}
	lowerCamel(t, "env list --json", cli)
	first := cli.(map[string]any)["declarations"].([]any)[0].(map[string]any)
	keys := slices.Sorted(func(yield func(string) bool) {
		for k := range first {
			if !yield(k) {
				return
			}
		}
	})
	if strings.Join(keys, ",") != "builtIn,description,key,owner" {
		t.Errorf("a declaration has keys %v, want builtIn, description, key, owner", keys)
	}

	out, errOut, code = run(t, "env", "show", "--json", "--home", home, "--cwd", t.TempDir())
	if code != 0 {
		t.Fatalf("env show --json: exit %d: %s", code, errOut)
	}
	cli = decodeAny(t, out)
	svc = serviceBody(t, home, http.MethodPost, "/v1/snapshot", `{}`)
	if !reflect.DeepEqual(cli, svc) {
		t.Errorf("env show --json = %s\nPOST /v1/snapshot = %v", out, svc)
	}
	if env, _ := cli.(map[string]any)["env"].([]any); !slices.Contains(env, any("DSH_HOME="+home)) {
		t.Errorf("env show --json = %s, want DSH_HOME=%s in env", out, home)
	}
}

// TestImagesListJSONListsHost: the oci store's list holds host in JSON
// as in the text.
func TestImagesListJSONListsHost(t *testing.T) {
	dir := t.TempDir()
	args := []string{"images", "list", "--state-dir", filepath.Join(dir, "state"), "--data-dir", filepath.Join(dir, "data"), "--home", filepath.Join(dir, "home")}
	text, errOut, code := run(t, args...)
	if code != 0 || !strings.Contains(text, "\nhost") {
		t.Fatalf("images list = %d %q (%s), want host listed", code, text, errOut)
	}
	out, errOut, code := run(t, append(args, "--json")...)
	var imgs []struct {
		Name string `json:"name"`
		Host bool   `json:"host"`
	}
	if err := json.Unmarshal([]byte(out), &imgs); code != 0 || err != nil || len(imgs) == 0 || imgs[0].Name != "host" || !imgs[0].Host {
		t.Errorf("images list --json = %d %q (%v, %s), want host first", code, out, err, errOut)
	}
}

// TestExecJSONErrorObject: with --json a call that did not run prints the
// service's error object on stdout and exits 125; a call that ran prints
// its result, and without --json stdout stays empty on failure.
func TestExecJSONErrorObject(t *testing.T) {
	sock := "unix://" + filepath.Join(t.TempDir(), "none.sock")
	out, errOut, code := run(t, "exec", "--json", "--cwd", t.TempDir(), "--server", sock, "--", "true")
	var body types.ErrorResponse
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if code != 125 || dec.Decode(&body) != nil || body.Error.Class != "unavailable" || !strings.Contains(body.Error.Message, "unreachable") {
		t.Errorf("exec --json to a missing service = %d, stdout %q (stderr %q); want 125 and an unavailable error object", code, out, errOut)
	}
	lowerCamel(t, "exec --json error", decodeAny(t, out))
	out, _, code = run(t, "exec", "--cwd", t.TempDir(), "--server", sock, "--", "true")
	if code != 125 || out != "" {
		t.Errorf("exec without --json to a missing service = %d, stdout %q; want 125 and nothing on stdout", code, out)
	}
	out, _, code = run(t, "exec", "--json", "--memory", "lots", "--cwd", t.TempDir(), "--", "true")
	if code != 2 || !strings.Contains(out, `"class":"invalid"`) {
		t.Errorf("exec --json --memory lots = %d, stdout %q; want 2 and an invalid error object", code, out)
	}
}
