package console

import (
	"bytes"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func openPair(t *testing.T, size sandbox.WindowSize, raw bool) *Pair {
	t.Helper()
	p, err := Open(size, raw)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestOpenSizeAndResize(t *testing.T) {
	p := openPair(t, sandbox.WindowSize{Rows: 33, Cols: 101}, false)
	if got, err := Size(p.Slave); err != nil || got != (sandbox.WindowSize{Rows: 33, Cols: 101}) {
		t.Errorf("Size after Open(33×101) = %+v, %v", got, err)
	}
	if err := p.Resize(sandbox.WindowSize{Rows: 50, Cols: 200}); err != nil {
		t.Fatal(err)
	}
	if got, err := Size(p.Slave); err != nil || got != (sandbox.WindowSize{Rows: 50, Cols: 200}) {
		t.Errorf("Size after Resize(50×200) = %+v, %v", got, err)
	}
	if err := p.Resize(sandbox.WindowSize{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := Size(p.Slave); got != (sandbox.WindowSize{Rows: 24, Cols: 80}) {
		t.Errorf("Size after Resize(zero) = %+v, want %+v", got, sandbox.WindowSize{Rows: 24, Cols: 80})
	}
}

// TestRelayRaw: through a raw pair, bytes pass unchanged both ways (no
// echo, no CR added to a LF, ^C is a byte), and the output ends when
// the slave is closed.
func TestRelayRaw(t *testing.T) {
	p := openPair(t, sandbox.WindowSize{}, true)
	if !IsTerminal(p.Slave) || IsTerminal(os.NewFile(^uintptr(0), "none")) {
		t.Fatalf("IsTerminal(slave) = false, or true for a bad file")
	}
	in := strings.NewReader("typed\x03\n")
	var out bytes.Buffer // read only once the relay has ended
	ended := p.Relay(in, &out)
	got := make([]byte, len("typed\x03\n"))
	if _, err := io.ReadFull(p.Slave, got); err != nil || string(got) != "typed\x03\n" {
		t.Errorf("the slave read %q, %v; want the typed bytes unchanged", got, err)
	}
	if _, err := p.Slave.Write([]byte("a\nb")); err != nil {
		t.Fatal(err)
	}
	p.CloseSlave()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("Relay's output did not end when the slave was closed")
	}
	if out.String() != "a\nb" {
		t.Errorf("Relay copied %q from the master, want %q (no echo, no CR)", out.String(), "a\nb")
	}
}

// TestCloseEndsRelay: Close ends a relay whose slave is still held.
func TestCloseEndsRelay(t *testing.T) {
	p, err := Open(sandbox.WindowSize{}, true)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	held, err := os.OpenFile(p.Slave.Name(), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	ended := p.Relay(nil, io.Discard)
	p.Close()
	select {
	case <-ended:
	case <-time.After(5 * time.Second):
		t.Fatal("Relay did not end on Close while the slave was held elsewhere")
	}
}

func TestMakeRawRestores(t *testing.T) {
	p := openPair(t, sandbox.WindowSize{}, false)
	before, err := unix.IoctlGetTermios(int(p.Slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	restore, err := MakeRaw(p.Slave)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := unix.IoctlGetTermios(int(p.Slave.Fd()), unix.TCGETS)
	if raw.Lflag&(unix.ECHO|unix.ICANON|unix.ISIG) != 0 {
		t.Errorf("MakeRaw left lflag %#x with echo, canonical mode or signal keys", raw.Lflag)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if err := restore(); err != nil { // idempotent
		t.Fatal(err)
	}
	after, _ := unix.IoctlGetTermios(int(p.Slave.Fd()), unix.TCGETS)
	if after.Lflag != before.Lflag || after.Iflag != before.Iflag || after.Oflag != before.Oflag {
		t.Errorf("restore left %+v, want %+v", after, before)
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := MakeRaw(f); err == nil {
		t.Errorf("MakeRaw(/dev/null) = nil error, want not a terminal")
	}
}

// TestReceiveMaster: a master sent over the console socket the way a
// runtime sends it (SCM_RIGHTS, with the terminal's name) comes back as
// a usable Pair; a connection that sends no descriptor is an error.
func TestReceiveMaster(t *testing.T) {
	sent := openPair(t, sandbox.WindowSize{}, true)
	path := filepath.Join(t.TempDir(), "console.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	masterFD := int(sent.Master.Fd()) // read here: the race detector sees no order through the socket
	send := func(withFD bool) {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		var oob []byte
		if withFD {
			oob = unix.UnixRights(masterFD)
		}
		if _, _, err := c.WriteMsgUnix([]byte("/dev/pts/0"), oob, nil); err != nil {
			t.Error(err)
		}
	}
	go send(true)
	got, err := ReceiveMaster(ln)
	if err != nil {
		t.Fatalf("ReceiveMaster = %v", err)
	}
	defer got.Close()
	if got.Slave != nil {
		t.Errorf("ReceiveMaster returned a slave")
	}
	if err := got.Resize(sandbox.WindowSize{Rows: 44, Cols: 144}); err != nil {
		t.Fatal(err)
	}
	if s, err := Size(sent.Slave); err != nil || s != (sandbox.WindowSize{Rows: 44, Cols: 144}) {
		t.Errorf("a resize through the received master gave the slave %+v, %v; want 44×144", s, err)
	}
	go send(false)
	if p, err := ReceiveMaster(ln); err == nil {
		p.Close()
		t.Errorf("ReceiveMaster of a message with no descriptor = nil error")
	}
	ln.Close()
	if _, err := ReceiveMaster(ln); err == nil {
		t.Errorf("ReceiveMaster on a closed listener = nil error")
	}
}
