package api

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestInheritedListenersServesPassedSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "a.sock")
	orig, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	f, err := orig.(*net.UnixListener).File()
	if err != nil {
		t.Fatal(err)
	}
	// The protocol hands the descriptor over, and inheritedListeners
	// closes it: pass a raw duplicate that no *os.File owns (f's
	// finalizer would otherwise close the number a second time, maybe
	// after another test reused it).
	fd, err := syscall.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"LISTEN_PID": "4242", "LISTEN_FDS": "1", "LISTEN_FDNAMES": "dsh"}
	ls, err := inheritedListeners(envOf(env), 4242, fd)
	if err != nil || len(ls) != 1 {
		t.Fatalf("inheritedListeners = %v, %v; want one listener", ls, err)
	}
	defer ls[0].Close()
	if got := ListenerAddress(ls[0]); got != "unix://"+sock {
		t.Errorf("address %q, want unix://%s", got, sock)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	conn, err := ls[0].Accept()
	if err != nil {
		t.Fatalf("accept on the inherited socket: %v", err)
	}
	conn.Close()

	// Variables meant for another process are ignored.
	env["LISTEN_PID"] = "1"
	if ls, err := inheritedListeners(envOf(env), 4242, fd); err != nil || ls != nil {
		t.Errorf("LISTEN_PID of another process: %v, %v; want none", ls, err)
	}
	if ls, err := inheritedListeners(envOf(nil), 4242, fd); err != nil || ls != nil {
		t.Errorf("no variables: %v, %v; want none", ls, err)
	}
}

func TestInheritedListenersRefusesBadInputCase(t *testing.T) {
	file, err := os.Create(filepath.Join(t.TempDir(), "plain"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	// The protocol hands the descriptors over: each case gets its own copy.
	dup := func() int {
		fd, err := syscall.Dup(int(file.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		return fd
	}
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"pid not a number", map[string]string{"LISTEN_PID": "x", "LISTEN_FDS": "1"}, "LISTEN_PID"},
		{"count not a number", map[string]string{"LISTEN_PID": "7", "LISTEN_FDS": "many"}, "LISTEN_FDS"},
		{"count negative", map[string]string{"LISTEN_PID": "7", "LISTEN_FDS": "-1"}, "LISTEN_FDS"},
		{"count too large", map[string]string{"LISTEN_PID": "7", "LISTEN_FDS": "100000"}, "LISTEN_FDS"},
		{"not a socket", map[string]string{"LISTEN_PID": "7", "LISTEN_FDS": "1"}, "is not a listening socket"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fd := -1 // the parse errors come before any descriptor is touched
			if tt.name == "not a socket" {
				fd = dup()
			}
			ls, err := inheritedListeners(envOf(tt.env), 7, fd)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("inheritedListeners = %v, %v; want an error naming %s", ls, err, tt.want)
			}
		})
	}
	if _, err := file.Stat(); err != nil {
		t.Errorf("a refused copy closed the original descriptor: %v", err)
	}
}

func TestCheckInheritedTCP(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := CheckInheritedTCP(l, false); err != nil {
		t.Errorf("loopback listener refused: %v", err)
	}
	remote := fakeAddrListener{l, &net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 7070}}
	if err := CheckInheritedTCP(remote, false); err == nil || !strings.Contains(err.Error(), "192.0.2.7") {
		t.Errorf("non-loopback listener without allow-remote: %v, want refused naming it", err)
	}
	if err := CheckInheritedTCP(remote, true); err != nil {
		t.Errorf("non-loopback listener with allow-remote: %v", err)
	}
}

type fakeAddrListener struct {
	net.Listener
	addr net.Addr
}

func (f fakeAddrListener) Addr() net.Addr { return f.addr }
