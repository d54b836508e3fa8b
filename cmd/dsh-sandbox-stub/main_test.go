package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
	"github.com/dsh-sandbox/dsh-sandbox/sandbox/stub"
)

var stubBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stub-test-")
	if err != nil {
		panic(err)
	}
	stubBin, err = fixtures.BuildStub(dir)
	if err != nil {
		os.RemoveAll(dir)
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// started is a stub running outside a container, with its control
// channel's other end.
type started struct {
	cmd            *exec.Cmd
	ctl            *os.File
	stdout, stderr outFile
	pid            int // the command's, from the started report
}

// outFile is a file a stub writes to: a file, not a pipe, so that a
// command outliving the stub (there is no pid namespace here) does not
// hold up Wait.
type outFile struct{ f *os.File }

func (o outFile) String() string {
	b, _ := os.ReadFile(o.f.Name())
	return string(b)
}

func startStub(t *testing.T) *started {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
	s := &started{ctl: ours}
	s.cmd = exec.Command(stubBin)
	s.cmd.Env = []string{}
	s.cmd.ExtraFiles = []*os.File{theirs}
	for _, o := range []*outFile{&s.stdout, &s.stderr} {
		f, err := os.CreateTemp(t.TempDir(), "out")
		if err != nil {
			t.Fatal(err)
		}
		o.f = f
	}
	s.cmd.Stdout, s.cmd.Stderr = s.stdout.f, s.stderr.f
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	if r, err := stub.ReadReport(ours); err != nil || r.Kind != stub.Ready {
		t.Fatalf("first report = %v, %v; want ready", r, err)
	}
	t.Cleanup(func() {
		ours.Close()
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
		if s.pid > 0 {
			_ = unix.Kill(s.pid, unix.SIGKILL) // outside a container, nothing else kills it
		}
		s.stdout.f.Close()
		s.stderr.f.Close()
	})
	return s
}

func (s *started) send(t *testing.T, c *stub.Command) {
	t.Helper()
	b, err := c.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ctl.Write(b); err != nil {
		t.Fatal(err)
	}
}

func (s *started) reports(t *testing.T) []stub.Report {
	t.Helper()
	var out []stub.Report
	for {
		r, err := stub.ReadReport(s.ctl)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		if r.Kind == stub.Started {
			s.pid = int(r.Value)
		}
		out = append(out, r)
	}
}

func (s *started) wait(t *testing.T) int {
	t.Helper()
	err := s.cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return s.cmd.ProcessState.ExitCode()
}

func call(argv ...string) *stub.Command {
	return &stub.Command{Argv: argv, Env: []string{"PATH=/usr/bin:/bin", "ONLY=this"}, Dir: "/tmp", Deadline: 30 * time.Second}
}

func TestStubRunsOneCommand(t *testing.T) {
	s := startStub(t)
	s.send(t, call("sh", "-c", `echo "$ONLY $(pwd)"; env | sort; ls /proc/self/fd; exit 7`))
	rs := s.reports(t)
	if code := s.wait(t); code != 7 {
		t.Errorf("stub exit = %d, want the command's 7", code)
	}
	if len(rs) != 2 || rs[0].Kind != stub.Started || rs[1].Kind != stub.Exited || unix.WaitStatus(rs[1].Value).ExitStatus() != 7 {
		t.Errorf("reports = %v, want started then exited 7", rs)
	}
	lines := strings.Split(strings.TrimSpace(s.stdout.String()), "\n")
	if lines[0] != "this /tmp" {
		t.Errorf("first line = %q, want %q", lines[0], "this /tmp")
	}
	// The command's environment is the call's (sh adds PWD, SHLVL, _),
	// and its descriptors are stdio plus the one ls opens: never the
	// control channel.
	out := s.stdout.String()
	if !strings.Contains(out, "ONLY=this\n") || strings.Contains(out, "\n3\n4\n") {
		t.Errorf("command saw env or descriptors it should not:\n%s", out)
	}
	fds := lines[len(lines)-4:]
	if strings.Join(fds, " ") != "0 1 2 3" {
		t.Errorf("descriptors of ls = %v, want 0 1 2 and its own 3 (the control channel is close-on-exec)", fds)
	}
}

func TestStubSignalStatus(t *testing.T) {
	s := startStub(t)
	s.send(t, call("sh", "-c", "kill -TERM $$"))
	rs := s.reports(t)
	if code := s.wait(t); code != 128+int(syscall.SIGTERM) {
		t.Errorf("stub exit = %d, want 143", code)
	}
	if len(rs) != 2 || !unix.WaitStatus(rs[1].Value).Signaled() {
		t.Errorf("reports = %v, want exited by signal", rs)
	}
}

func TestStubNotFound(t *testing.T) {
	s := startStub(t)
	s.send(t, call("no-such-program-here"))
	rs := s.reports(t)
	if code := s.wait(t); code != 127 {
		t.Errorf("stub exit = %d, want 127", code)
	}
	if len(rs) != 1 || rs[0] != (stub.Report{Kind: stub.Failed, Value: 127}) {
		t.Errorf("reports = %v, want failed 127", rs)
	}
	if !strings.Contains(s.stderr.String(), "no-such-program-here: not found") {
		t.Errorf("stderr = %q, want a not-found message", s.stderr.String())
	}
}

func TestStubNoWorkdir(t *testing.T) {
	s := startStub(t)
	c := call("true")
	c.Dir = "/no/such/dir"
	s.send(t, c)
	if code := s.wait(t); code != 126 {
		t.Errorf("stub exit = %d, want 126", code)
	}
}

// TestStubExitsWhenExecutorGone: closing the executor's end makes the
// stub exit at once, whatever the command does (in a container the
// kernel then kills the command with the pid namespace).
func TestStubExitsWhenExecutorGone(t *testing.T) {
	s := startStub(t)
	s.send(t, call("sleep", "60"))
	r, err := stub.ReadReport(s.ctl)
	if err != nil || r.Kind != stub.Started {
		t.Fatalf("first report = %v, %v; want started", r, err)
	}
	s.pid = int(r.Value)
	t0 := time.Now()
	s.ctl.Close()
	if code := s.wait(t); code != 137 {
		t.Errorf("stub exit = %d, want 137", code)
	}
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("stub took %v to exit after EOF", d)
	}
}

// TestStubExitsBeforeCall: a slot let go before its call (EOF first)
// runs nothing.
func TestStubExitsBeforeCall(t *testing.T) {
	s := startStub(t)
	s.ctl.Close()
	if code := s.wait(t); code != 137 {
		t.Errorf("stub exit = %d, want 137", code)
	}
}

func TestStubDeadline(t *testing.T) {
	s := startStub(t)
	c := call("sleep", "60")
	c.Deadline = 300 * time.Millisecond
	s.send(t, c)
	rs := s.reports(t)
	if code := s.wait(t); code != 137 {
		t.Errorf("stub exit = %d, want 137", code)
	}
	if len(rs) != 2 || rs[1].Kind != stub.Expired {
		t.Errorf("reports = %v, want started then expired", rs)
	}
}

func TestStubRefusesMalformedMessage(t *testing.T) {
	s := startStub(t)
	if _, err := s.ctl.Write([]byte("DSHC\x00\x00\x00\x01\x09")); err != nil {
		t.Fatal(err)
	}
	if code := s.wait(t); code != 125 {
		t.Errorf("stub exit = %d, want 125", code)
	}
}

// BenchmarkStubStart is the start of the stub up to reading its call,
// and one `true`, outside a container.
func BenchmarkStubStart(b *testing.B) {
	for i := 0; i < b.N; i++ {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		ours, theirs := os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
		cmd := exec.Command(stubBin)
		cmd.Env = []string{}
		cmd.ExtraFiles = []*os.File{theirs}
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		theirs.Close()
		if r, err := stub.ReadReport(ours); err != nil || r.Kind != stub.Ready {
			b.Fatalf("first report = %v, %v; want ready", r, err)
		}
		msg, _ := call("/bin/true").Encode()
		ours.Write(msg)
		for {
			if _, err := stub.ReadReport(ours); err != nil {
				break
			}
		}
		cmd.Wait()
		ours.Close()
	}
}

// TestReserveThreadsKept: after reserveThreads the process has at least
// that many threads beside the one running the test, and still has them
// a moment later (the runtime keeps idle threads; it does not end them).
func TestReserveThreadsKept(t *testing.T) {
	threads := func() int {
		data, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "Threads:"); ok {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil {
					t.Fatal(err)
				}
				return n
			}
		}
		t.Fatal("no Threads line in /proc/self/status")
		return 0
	}
	const n = 12 // more than the test binary starts on its own
	before := threads()
	reserveThreads(n)
	after := threads()
	time.Sleep(100 * time.Millisecond)
	later := threads()
	if after < n+1 || later < after {
		t.Errorf("threads: %d before, %d after reserveThreads(%d), %d a moment later; want at least %d, kept", before, after, n, later, n+1)
	}
}
