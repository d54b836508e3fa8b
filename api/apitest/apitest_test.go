package apitest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// recorder is a testing.TB that keeps what Errorf reports.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestValidatorCases: answers the contract describes pass and are
// counted; answers it does not describe fail the test.
func TestValidatorCases(t *testing.T) {
	v, err := New()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method, path, ctype, body string
		status                          int
		allow                           string
		ok                              bool
	}{
		{"Health", "GET", "/v1/health", "application/json", `{"status":"ok"}`, 200, "", true},
		{"HealthExtraField", "GET", "/v1/health", "application/json", `{"status":"ok","x":1}`, 200, "", false},
		{"UndocumentedStatus", "GET", "/v1/health", "application/json", `{"status":"ok"}`, 418, "", false},
		{"ErrorBody", "GET", "/v1/jobs", "application/json", `{"error":{"class":"not_found","message":"no"}}`, 404, "", true},
		{"ErrorBodyBadClass", "GET", "/v1/jobs", "application/json", `{"error":{"class":"oops","message":"no"}}`, 404, "", false},
		{"WrongContentType", "GET", "/v1/calls", "text/plain", `{"calls":[]}`, 200, "", false},
		{"Stream", "POST", "/v1/run", "application/x-ndjson", "{\"type\":\"stdout\",\"data\":\"aGk=\"}\n{\"type\":\"error\",\"error\":{\"class\":\"internal\",\"message\":\"x\"}}\n", 200, "", true},
		{"StreamBadEarlyLine", "POST", "/v1/run", "application/x-ndjson", "{\"type\":\"nope\"}\n{\"type\":\"error\",\"error\":{\"class\":\"internal\",\"message\":\"x\"}}\n", 200, "", false},
		{"MethodNotAllowed", "DELETE", "/v1/health", "application/json", `{"error":{"class":"method_not_allowed","message":"no"}}`, 405, "GET, HEAD", true},
		{"MethodNotAllowedNoAllow", "DELETE", "/v1/health", "application/json", `{"error":{"class":"method_not_allowed","message":"no"}}`, 405, "", false},
		{"UnknownPath200", "GET", "/v1/nope", "application/json", `{}`, 200, "", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				if tc.allow != "" {
					w.Header().Set("Allow", tc.allow)
				}
				w.WriteHeader(tc.status)
				io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			rec := &recorder{TB: t}
			before := v.Total()
			req, _ := http.NewRequest(tc.method, srv.URL+tc.path, strings.NewReader(""))
			resp, err := v.Client(rec, nil).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if ok := len(rec.errs) == 0; ok != tc.ok {
				t.Errorf("checked ok = %t (%q), want %t", ok, rec.errs, tc.ok)
			}
			if counted := v.Total() == before+1; counted != tc.ok {
				t.Errorf("counted = %t, want %t", counted, tc.ok)
			}
		})
	}
}
