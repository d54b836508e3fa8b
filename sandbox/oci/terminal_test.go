package oci

import (
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestTerminalCapable(t *testing.T) {
	for rt, want := range map[string]bool{RuntimeRunc: true, RuntimeCrun: true, RuntimeRunsc: false, "": false} {
		if got := terminalCapable(rt); got != want {
			t.Errorf("terminalCapable(%q) = %v, want %v", rt, got, want)
		}
	}
}

// TestOpenTerminal: runc runs on a host terminal of ours (its stdio);
// crun gets --console-socket before the container id, a socket that
// exists until close.
func TestOpenTerminal(t *testing.T) {
	term := &sandbox.Terminal{Size: sandbox.WindowSize{Rows: 30, Cols: 90}}

	cmd := exec.Command("runc", "run", "--bundle", "/b", "call-1")
	ct, err := openTerminal(cmd, RuntimeRunc, term)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if ct.pair == nil || cmd.Stdin != ct.pair.Slave || cmd.Stdout != ct.pair.Slave || cmd.Stderr != ct.pair.Slave {
		t.Errorf("runc: stdio is not the host terminal's slave")
	}
	if slices.Contains(cmd.Args, "--console-socket") {
		t.Errorf("runc: args %q have --console-socket, which runc refuses in the foreground", cmd.Args)
	}
	ct.close()
	ct.close() // twice is fine

	cmd = exec.Command("crun", "run", "--bundle", "/b", "call-1")
	ct, err = openTerminal(cmd, RuntimeCrun, term)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.Index(cmd.Args, "--console-socket")
	if i < 0 || i+2 != len(cmd.Args)-1 || cmd.Args[len(cmd.Args)-1] != "call-1" {
		t.Fatalf("crun: args %q, want --console-socket PATH just before the container id", cmd.Args)
	}
	sock := cmd.Args[i+1]
	if len(sock) > 107 {
		t.Errorf("console socket path %q is longer than a socket address allows", sock)
	}
	if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Errorf("console socket %s: %v, want a listening socket", sock, err)
	}
	if cmd.Stdin != nil || cmd.Stdout != nil {
		t.Errorf("crun: stdio was changed; the terminal comes over the socket")
	}
	ct.close()
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("console socket %s after close: %v, want it removed", sock, err)
	}
}
