package egress

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	xproxy "golang.org/x/net/proxy"
	"golang.org/x/sys/unix"
)

// TestSOCKS connects through a call's SOCKS5 server from inside its
// namespace, by name and by address, and checks the verdicts and the
// record.
func TestSOCKS(t *testing.T) {
	requireRoot(t)
	up := newEchoUpstream(t)
	c, err := Start(Options{Allow: []string{"echo.test:7", "inside.test"}, Network: testNetwork(up.ln.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		target string
		ok     bool
	}{
		{"echo.test:7", true},
		{"echo.test:8", false},        // port not listed
		{"inside.test:7", false},      // resolves to a private address
		{"93.184.216.34:7", false},    // an IP literal nobody listed
		{"other.test:7", false},       // no allow entry
		{"169.254.169.254:80", false}, // metadata
	} {
		err := inNamespace(t, c.NamespacePath(), func() error {
			d, err := xproxy.SOCKS5("tcp", SOCKSAddr, nil, xproxy.Direct)
			if err != nil {
				return err
			}
			conn, err := d.Dial("tcp", tc.target)
			if err != nil {
				return err
			}
			defer conn.Close()
			fmt.Fprintln(conn, "ping")
			line, err := bufio.NewReader(conn).ReadString('\n')
			if err != nil || line != "ping\n" {
				return fmt.Errorf("echo = %q, %v", line, err)
			}
			return nil
		})
		if (err == nil) != tc.ok {
			t.Errorf("SOCKS5 CONNECT %s = %v, want success %v", tc.target, err, tc.ok)
		}
	}
	recs := c.Close()
	verdicts := map[string]string{}
	for _, r := range recs {
		verdicts[fmt.Sprintf("%s:%d", r.Host, r.Port)] = r.Verdict
	}
	for hp, want := range map[string]string{"echo.test:7": Allowed, "echo.test:8": Denied, "inside.test:7": Denied, "93.184.216.34:7": Denied, "other.test:7": Denied, "169.254.169.254:80": Denied} {
		if verdicts[hp] != want {
			t.Errorf("record of %s = %q, want %q (%+v)", hp, verdicts[hp], want, recs)
		}
	}
}

// TestStartInNamespace serves a call in a namespace made beforehand (a
// container's, on the docker backend) and checks that the proxy answers
// there and that Close leaves the namespace to its owner.
func TestStartInNamespace(t *testing.T) {
	requireRoot(t)
	up := newEchoUpstream(t)
	nsc := make(chan *os.File, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			t.Error(err)
			nsc <- nil
			return
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			t.Error(err)
		}
		nsc <- f
	}()
	ns := <-nsc
	if ns == nil {
		t.FailNow()
	}
	defer ns.Close()
	path := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), ns.Fd())
	c, err := Start(Options{Allow: []string{"echo.test:7"}, Network: testNetwork(up.ln.Addr().String()), Namespace: path})
	if err != nil {
		t.Fatal(err)
	}
	conn, _, code := connect(t, c, "echo.test:7")
	conn.Close()
	if code != 200 {
		t.Errorf("CONNECT echo.test:7 in the given namespace = %d, want 200", code)
	}
	c.Close()
	if err := inNamespace(t, path, func() error {
		_, err := net.Dial("tcp", ProxyAddr)
		return err
	}); err == nil {
		t.Errorf("the proxy still listens in the namespace after Close")
	}
	if _, err := Start(Options{Namespace: "/nonexistent/ns"}); err == nil {
		t.Errorf("Start in a namespace that does not exist = nil, want an error")
	}
}

// TestSOCKSHandshakeDeadline: a SOCKS5 client that sends nothing is
// closed after handshakeTimeout, while a tunnel opened before lives on.
func TestSOCKSHandshakeDeadline(t *testing.T) {
	requireRoot(t)
	up := newEchoUpstream(t)
	c, err := Start(Options{Allow: []string{"echo.test:7"}, Network: testNetwork(up.ln.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var silent, tunnel net.Conn
	err = inNamespace(t, c.NamespacePath(), func() (err error) {
		if silent, err = net.Dial("tcp", SOCKSAddr); err != nil {
			return err
		}
		d, err := xproxy.SOCKS5("tcp", SOCKSAddr, nil, xproxy.Direct)
		if err != nil {
			return err
		}
		tunnel, err = d.Dial("tcp", "echo.test:7")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	defer tunnel.Close()
	silent.SetReadDeadline(time.Now().Add(3 * handshakeTimeout))
	if n, err := silent.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Errorf("a silent SOCKS5 client read %d bytes, %v; want the connection closed after %v", n, err, handshakeTimeout)
	}
	fmt.Fprintln(tunnel, "ping")
	tunnel.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := bufio.NewReader(tunnel).ReadString('\n'); err != nil || line != "ping\n" {
		t.Errorf("echo through a tunnel older than the handshake deadline = %q, %v", line, err)
	}
}
