package api_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api"
	"github.com/dsh-sandbox/dsh-sandbox/api/client"
	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
)

func TestListenUnixModes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	sock := filepath.Join(dir, "s.sock")
	l, err := api.ListenUnix(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for path, want := range map[string]os.FileMode{dir: 0o700, sock: 0o600} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("mode of %s = %v (%v), want %v", path, fi.Mode().Perm(), err, want)
		}
	}
	if _, err := api.ListenUnix(sock); err == nil || !strings.Contains(err.Error(), "another instance") {
		t.Errorf("ListenUnix on a live socket = %v, want an error", err)
	}
}

func TestListenUnixRefusesWorldWritableDir(t *testing.T) {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if l, err := api.ListenUnix(filepath.Join(dir, "s.sock")); err == nil {
		l.Close()
		t.Errorf("ListenUnix in a 0777 directory = nil, want an error")
	}
}

func TestReadTokenPerms(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, content string
		mode          os.FileMode
		ok            bool
	}{
		{"Owner", "s3cret\n", 0o600, true},
		{"GroupReadable", "s3cret", 0o640, false},
		{"WorldReadable", "s3cret", 0o644, false},
		{"Empty", "  \n", 0o600, false},
	}
	for _, tc := range cases {
		p := filepath.Join(dir, tc.name)
		os.WriteFile(p, []byte(tc.content), 0o600)
		os.Chmod(p, tc.mode)
		tok, err := api.ReadToken(p)
		if (err == nil) != tc.ok || (tc.ok && tok != "s3cret") {
			t.Errorf("ReadToken(%s) = %q, %v; want ok=%t", tc.name, tok, err, tc.ok)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("ReadToken(%s) error reveals the token: %v", tc.name, err)
		}
	}
}

func TestTCPNeedsToken(t *testing.T) {
	f := newFixture(t, &fakeExec{}, nil)
	l, err := api.ListenTCP("127.0.0.1:0", false)
	if err != nil {
		t.Fatal(err)
	}
	go f.srv.Serve(l, "good-token")
	addr := "tcp://" + l.Addr().String()
	req := types.RunRequest{Policy: policy.WorkspaceWrite, Command: "x"}
	for _, tok := range []string{"", "wrong", "good-token-but-longer"} {
		cl, _ := client.New(addr, checked(t, client.Options{Token: tok}))
		if _, err := cl.Run(context.Background(), req); !errors.Is(err, types.ErrUnauthorized) || api.HTTPStatus(err) != 401 {
			t.Errorf("Run with token %q = %v, want 401 ErrUnauthorized", tok, err)
		}
	}
	if n := f.exec.calls.Load(); n != 0 {
		t.Errorf("unauthorized requests ran %d calls", n)
	}
	cl, _ := client.New(addr, checked(t, client.Options{Token: "good-token"}))
	if _, err := cl.Run(context.Background(), req); err != nil {
		t.Errorf("Run with the token = %v, want nil", err)
	}
	if _, err := api.ListenTCP("192.0.2.1:0", false); err == nil {
		t.Errorf("ListenTCP on a non-loopback address without allowRemote = nil, want an error")
	}
}
