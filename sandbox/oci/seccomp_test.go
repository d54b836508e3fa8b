package oci

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// i386Probe returns a static x86_64 ELF program that makes one system
// call through i386's ABI (int 0x80: getpid, number 20) when compat is
// true, and then exits with status 7 through the native ABI.
func i386Probe(compat bool) []byte {
	var code []byte
	if compat {
		code = append(code, 0xb8, 20, 0, 0, 0, 0xcd, 0x80) // mov eax, 20; int 0x80
	}
	code = append(code,
		0xbf, 7, 0, 0, 0, // mov edi, 7
		0xb8, 60, 0, 0, 0, // mov eax, 60 (exit)
		0x0f, 0x05) // syscall
	const base, headers = 0x400000, 64 + 56
	le := binary.LittleEndian
	b := []byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	b = le.AppendUint16(b, 2)    // ET_EXEC
	b = le.AppendUint16(b, 0x3e) // EM_X86_64
	b = le.AppendUint32(b, 1)
	b = le.AppendUint64(b, base+headers) // entry
	b = le.AppendUint64(b, 64)           // program headers
	b = le.AppendUint64(b, 0)            // no section headers
	b = le.AppendUint32(b, 0)
	b = le.AppendUint16(b, 64)
	b = le.AppendUint16(b, 56)
	b = le.AppendUint16(b, 1)
	b = append(b, 0, 0, 0, 0, 0, 0)
	size := uint64(headers + len(code))
	b = le.AppendUint32(b, 1) // PT_LOAD
	b = le.AppendUint32(b, 5) // read, execute
	b = le.AppendUint64(b, 0)
	b = le.AppendUint64(b, base)
	b = le.AppendUint64(b, base)
	b = le.AppendUint64(b, size)
	b = le.AppendUint64(b, size)
	b = le.AppendUint64(b, 0x1000)
	return append(b, code...)
}

// TestSeccompRefusesCompatSyscalls: the policy's seccomp filter lists
// only the native architecture, so an i386 system call (int 0x80) kills
// the command with SIGSYS in the container, while the same program
// without it exits normally there, and the one with it runs on the host.
func TestSeccompRefusesCompatSyscalls(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the probe is x86_64 machine code (GOARCH %s)", runtime.GOARCH)
	}
	host := filepath.Join(t.TempDir(), "compat")
	if err := os.WriteFile(host, i386Probe(true), 0o755); err != nil {
		t.Fatal(err)
	}
	var exit *exec.ExitError
	if err := exec.Command(host).Run(); !errors.As(err, &exit) || exit.ExitCode() != 7 {
		t.Fatalf("the probe on the host (no filter) = %v, want exit status 7", err)
	}
	for _, rt := range stubRuntimes {
		t.Run(rt, func(t *testing.T) {
			e := newTestExecutor(t, rt)
			ws := t.TempDir()
			for name, compat := range map[string]bool{"compat": true, "native": false} {
				if err := os.WriteFile(filepath.Join(ws, name), i386Probe(compat), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			req := &sandbox.Request{
				Command: "./native; echo native=$?; ./compat; echo compat=$?",
				Session: sandbox.Session{ID: "s", Cwd: ws},
				Policy:  testPolicy(t, rt),
			}
			res, err := e.Run(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if want := "native=7\ncompat=159\n"; res.Stdout.Text != want {
				t.Errorf("stdout = %q, want %q (128 + SIGSYS for the i386 call; stderr %q)", res.Stdout.Text, want, strings.TrimSpace(res.Stderr.Text))
			}
		})
	}
}
