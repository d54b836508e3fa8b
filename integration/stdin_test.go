//go:build integration

package integration

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// runStdin runs the binary like run, with stdin read from in (through a
// pipe, as a shell pipeline gives it).
func runStdin(t *testing.T, in io.Reader, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	var stdout, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = in, &stdout, &stderr
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running %v: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), code}
}

// binaryData is n bytes of seeded pseudo-random data (every byte value,
// NULs and invalid UTF-8 included) and its sha256 in hex.
func binaryData(n int) ([]byte, string) {
	r := rand.NewChaCha8([32]byte{'d', 's', 'h'})
	data := make([]byte, n)
	_, _ = r.Read(data)
	sum := sha256.Sum256(data)
	return data, hex.EncodeToString(sum[:])
}

// firstField is the first word of out (sha256sum's hash).
func firstField(out string) string {
	f := strings.Fields(out)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

// TestExecStdin: a piped stdin reaches the command (echo hello | exec --
// cat), --stdin-file - reads it, /dev/null (a character device, like a
// terminal) gives an empty stdin, and a piped stdin over the whole-read
// bound is refused naming -i, while -i streams it.
func TestExecStdin(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	base := append([]string{"exec"}, e.flags("")...)
	base = append(base, "--runtime", "runc")

	r := runStdin(t, strings.NewReader("hello\n"), append(base, "--", "cat")...)
	if r.code != 0 || r.stdout != "hello\n" {
		t.Errorf("echo hello | exec -- cat = %d, %q (stderr %q); want 0, %q", r.code, r.stdout, r.stderr, "hello\n")
	}
	r = runStdin(t, strings.NewReader("from dash\n"), append(base, "--stdin-file", "-", "--", "cat")...)
	if r.code != 0 || r.stdout != "from dash\n" {
		t.Errorf("exec --stdin-file - -- cat = %d, %q (stderr %q)", r.code, r.stdout, r.stderr)
	}
	// An argv call reads stdin the same way.
	r = runStdin(t, strings.NewReader("a\nb\n"), append(base, "--", "wc", "-l")...)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "2" {
		t.Errorf("exec -- wc -l = %d, %q (stderr %q); want 2", r.code, r.stdout, r.stderr)
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	r = runStdin(t, devNull, append(base, "--", "cat; echo end")...)
	if r.code != 0 || r.stdout != "end\n" {
		t.Errorf("exec </dev/null -- cat = %d, %q (stderr %q); want an empty stdin", r.code, r.stdout, r.stderr)
	}

	big := io.LimitReader(zeroReader{}, 64<<20+1)
	r = runStdin(t, big, append(base, "--", "wc -c")...)
	refused(t, "64 MiB + 1 byte piped without -i", r, "stdin", "-i")
	r = runStdin(t, io.LimitReader(zeroReader{}, 64<<20+1), append(base, "-i", "--", "wc -c")...)
	if r.code != 0 || strings.TrimSpace(r.stdout) != "67108865" {
		t.Errorf("exec -i -- wc -c of 64 MiB + 1 = %d, %q (stderr %q)", r.code, r.stdout, r.stderr)
	}
	r = runStdin(t, strings.NewReader("x"), append(base, "-i", "--stdin-file", "-", "--", "cat")...)
	refused(t, "-i with --stdin-file", r, "--interactive", "--stdin-file")
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestExecStdinStreamsBinary100MB: 100 MB of binary data through exec -i
// on oci/runc arrive byte for byte (the hash inside matches), and -i
// streams: a command that reads one line and exits ends the call while
// the CLI's stdin is still open.
func TestExecStdinStreamsBinary100MB(t *testing.T) {
	requireRoot(t)
	e := newEnv(t)
	base := append([]string{"exec"}, e.flags("")...)
	base = append(base, "--backend", "oci", "--runtime", "runc", "-i")
	data, want := binaryData(100 << 20)
	r := runStdin(t, bytes.NewReader(data), append(base, "--", "sha256sum")...)
	if r.code != 0 || firstField(r.stdout) != want {
		t.Fatalf("100 MB through exec -i -- sha256sum = %d, %q (stderr %q); want %s", r.code, r.stdout, r.stderr, want)
	}
	// The shell form, through a pipeline inside the call.
	r = runStdin(t, bytes.NewReader(data), append(base, "--", "cat | sha256sum")...)
	if r.code != 0 || firstField(r.stdout) != want {
		t.Errorf("100 MB through exec -i -- 'cat | sha256sum' = %d, %q (stderr %q); want %s", r.code, r.stdout, r.stderr, want)
	}

	cmd := exec.Command(binary, append(base, "--", "head -n1")...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(in, "first line\n"); err != nil {
		t.Fatal(err)
	}
	// stdin stays open: a whole read would never end; the call must.
	if err := cmd.Wait(); err != nil || stdout.String() != "first line\n" {
		t.Errorf("exec -i -- 'head -n1' with stdin open = %v, %q (stderr %q); want %q", err, stdout.String(), stderr.String(), "first line\n")
	}
}

// TestExecStdinDaemonBackends: binary stdin reaches the docker and
// containerd backends byte for byte, streamed (-i) and read whole.
func TestExecStdinDaemonBackends(t *testing.T) {
	requireDaemons(t)
	e := newEnv(t)
	name := "dsh-itest-busybox:1"
	importEverywhere(t, e, testImageTar(t), name)
	data, want := binaryData(8 << 20)
	for _, b := range []string{"docker", "containerd"} {
		for _, mode := range [][]string{{"-i"}, nil} {
			args := append(append([]string{"exec"}, e.flags("")...), daemonFlags()...)
			args = append(append(args, "--backend", b, "--image", name), mode...)
			r := runStdin(t, bytes.NewReader(data), append(args, "--", "sha256sum")...)
			if r.code != 0 || firstField(r.stdout) != want {
				t.Errorf("--backend %s %v: 8 MiB through sha256sum = %d, %q (stderr %q); want %s", b, mode, r.code, r.stdout, r.stderr, want)
			}
		}
	}
}
