package api

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/overlay"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestSandboxedPeerCases(t *testing.T) {
	const own = "pid:[4026531836]"
	v1 := func(path string) string { return "12:pids:" + path + "\n11:memory:" + path + "\n0::/user.slice\n" }
	cases := []struct {
		name, cgroup, ns string
		sandboxed        bool
	}{
		{"HostShell", "0::/user.slice/user-0.slice/session-3.scope\n", own, false},
		{"ServiceUnit", "0::/system.slice/dsh-sandbox.service\n", own, false},
		{"Harness", v1("/system.slice/dsh.service"), own, false},
		{"OCICallV1", v1("/dsh-sandbox/i-0123456789ab/call-0123"), own, true},
		{"OCICallV2", "0::/dsh-sandbox/i-0123456789ab/call-0123\n", own, true},
		{"ContainerdCall", "0::/dsh-sandbox-containerd/i-1/call-2\n", own, true},
		{"DockerCallOtherNS", "0::/docker/4f2a9c\n", "pid:[4026532999]", true},
		{"AnyOtherPIDNamespace", "0::/user.slice\n", "pid:[4026532001]", true},
		{"CallCgroupAmongOthers", "3:cpu:/\n0::/dsh-sandbox/i-1/c\n", own, true},
		{"NameOnlyContains", "0::/system.slice/my-dsh-sandbox-notes.scope\n", own, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := sandboxedPeer(tc.cgroup, tc.ns, own)
			if (got != "") != tc.sandboxed {
				t.Errorf("sandboxedPeer(%q, %q) = %q, want sandboxed=%t", tc.cgroup, tc.ns, got, tc.sandboxed)
			}
		})
	}
}

func TestClassifyPeerReadsProc(t *testing.T) {
	proc := t.TempDir()
	mk := func(pid, cgroup, ns string) {
		dir := filepath.Join(proc, pid, "ns")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if cgroup != "" {
			os.WriteFile(filepath.Join(proc, pid, "cgroup"), []byte(cgroup), 0o644)
		}
		if ns != "" {
			os.Symlink(ns, filepath.Join(dir, "pid"))
		}
	}
	mk("self", "0::/\n", "pid:[1]")
	mk("10", "0::/user.slice\n", "pid:[1]")
	mk("11", "0::/dsh-sandbox/i-1/call-1\n", "pid:[1]")
	mk("12", "0::/user.slice\n", "pid:[2]")
	mk("13", "", "pid:[1]")
	cases := []struct {
		pid int
		ok  bool
	}{{10, true}, {11, false}, {12, false}, {13, false}, {14, false}, {0, false}}
	for _, tc := range cases {
		err := classifyPeer(proc, tc.pid)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, types.ErrForbidden)) {
			t.Errorf("classifyPeer(pid %d) = %v, want ok=%t (else types.ErrForbidden)", tc.pid, err, tc.ok)
		}
	}
	// This test's own process is an ordinary host process.
	if err := classifyPeer("/proc", os.Getpid()); err != nil {
		t.Errorf("classifyPeer(this process) = %v, want nil", err)
	}
}

func TestIdentifyRefusesSandboxedPeerBeforeBody(t *testing.T) {
	reached := false
	h := identify(nil, http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached = true }))
	for _, p := range []peer{
		{uid: 0, pid: 42, refusal: classifyPeer(t.TempDir(), 42)},
		{uid: 0, pid: 0, refusal: classifyPeer("/proc", 0)},
	} {
		body := &countingReader{}
		req := httptest.NewRequest(http.MethodPost, "/v1/run", body)
		req = req.WithContext(context.WithValue(req.Context(), peerKey{}, p))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusForbidden || w.Header().Get("Connection") != "close" || reached || body.n != 0 {
			t.Errorf("sandboxed peer: %d, Connection %q, handler reached %t, body bytes read %d; want 403, close, false, 0", w.Code, w.Header().Get("Connection"), reached, body.n)
		}
	}
	// The legitimate variant: a host peer gets its socket identity.
	var got Client
	h = identify(nil, http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { got, _ = ClientFrom(r.Context()) }))
	req := httptest.NewRequest(http.MethodGet, "/v1/health", nil)
	req = req.WithContext(context.WithValue(req.Context(), peerKey{}, peer{uid: 1000, gid: 1000, pid: 7}))
	h.ServeHTTP(httptest.NewRecorder(), req)
	if got.Kind != ClientSocket || got.UID != 1000 || got.Key() != "socket:1000" {
		t.Errorf("host peer uid 1000 = %+v, want a socket client keyed by its uid", got)
	}
}

type countingReader struct{ n int }

func (c *countingReader) Read(p []byte) (int, error) {
	c.n += len(p)
	return len(p), nil
}

// TestCheckDirOwnership: a socket peer that is not root may only use a
// directory it owns; root and token clients are not bound by ownership.
func TestCheckDirOwnership(t *testing.T) {
	s, err := NewServer(Options{Executor: nopExec{}, Policies: map[string]sandbox.Policy{"p": {}}, Registry: overlay.NewRegistry(), Home: "/nonexistent-home"})
	if err != nil {
		t.Fatal(err)
	}
	rootOwned := t.TempDir()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root (to create a directory owned by another uid); CI runs as root")
		}
		t.Skip("needs root to create a directory owned by another uid")
	}
	userOwned := filepath.Join(rootOwned, "user")
	if err := os.Mkdir(userOwned, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(userOwned, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	user := Client{Kind: ClientSocket, UID: 1000, GID: 1000, Name: "uid 1000"}
	if _, err := s.checkDir(user, "session.cwd", rootOwned); !errors.Is(err, types.ErrForbidden) || !strings.Contains(err.Error(), "session.cwd") {
		t.Errorf("uid 1000 using a root-owned dir = %v, want 403 naming session.cwd", err)
	}
	if got, err := s.checkDir(user, "session.cwd", userOwned); err != nil || got != userOwned {
		t.Errorf("uid 1000 using its own dir = %q, %v; want it accepted", got, err)
	}
	root := Client{Kind: ClientSocket, UID: 0, Name: "uid 0"}
	if _, err := s.checkDir(root, "session.cwd", userOwned); err != nil {
		t.Errorf("root using uid 1000's dir = %v, want it accepted", err)
	}
}

type nopExec struct{}

func (nopExec) Run(context.Context, *sandbox.Request) (*sandbox.Result, error) {
	return &sandbox.Result{}, nil
}

func TestParseTokensCases(t *testing.T) {
	cases := []struct {
		name, data string
		want       []TokenClient
		bad        bool
	}{
		{"Legacy", "s3cret\n", []TokenClient{{Name: LegacyTokenName, Token: "s3cret"}}, false},
		{"LegacyWithComment", "# the token\n  s3cret  \n", []TokenClient{{Name: LegacyTokenName, Token: "s3cret"}}, false},
		{"Named", "# clients\ndsh tok-a /srv/a:/srv/b/\nci tok-b\n", []TokenClient{
			{Name: "dsh", Token: "tok-a", Roots: []string{"/srv/a", "/srv/b"}}, {Name: "ci", Token: "tok-b"}}, false},
		{"Empty", "\n# nothing\n", nil, true},
		{"TwoLegacyLines", "a\nb\n", nil, true},
		{"BadName", "a/b Zt1\n", nil, true},
		{"DuplicateName", "a Zt1\na Zt2\n", nil, true},
		{"DuplicateToken", "a Zt1\nb Zt1\n", nil, true},
		{"RelativeRoot", "a Zt1 work\n", nil, true},
		{"TooManyFields", "a Zt1 /w extra\n", nil, true},
		{"Harness", "dsh Zt1 harness\nci Zt2\n", []TokenClient{{Name: "dsh", Token: "Zt1", Harness: true}, {Name: "ci", Token: "Zt2"}}, false},
		{"HarnessWithRoots", "dsh Zt1 /w harness\n", []TokenClient{{Name: "dsh", Token: "Zt1", Roots: []string{"/w"}, Harness: true}}, false},
		{"HarnessBeforeRoots", "dsh Zt1 harness /w\n", nil, true},
		{"HarnessTwice", "dsh Zt1 harness harness\n", nil, true},
		{"LegacyIsNoHarness", "harness\n", []TokenClient{{Name: LegacyTokenName, Token: "harness"}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTokens([]byte(tc.data))
			if (err != nil) != tc.bad {
				t.Fatalf("ParseTokens(%q) = %+v, %v; want error=%t", tc.data, got, err, tc.bad)
			}
			if err != nil {
				if strings.Contains(err.Error(), "Zt") {
					t.Errorf("ParseTokens(%q) error reveals a token: %v", tc.data, err)
				}
				return
			}
			if len(got) != len(tc.want) {
				t.Fatalf("ParseTokens(%q) = %+v, want %+v", tc.data, got, tc.want)
			}
			for i := range got {
				if got[i].Name != tc.want[i].Name || got[i].Token != tc.want[i].Token || strings.Join(got[i].Roots, ":") != strings.Join(tc.want[i].Roots, ":") || got[i].Harness != tc.want[i].Harness {
					t.Errorf("ParseTokens(%q)[%d] = %+v, want %+v", tc.data, i, got[i], tc.want[i])
				}
			}
		})
	}
}
