package sandboxtest

import (
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// hardeningCases check what a red-team run found open on some backends:
// system calls outside the seccomp profile (io_uring, AF_VSOCK sockets),
// host-identifying kernel files, the host's cgroup paths, and bind
// mounts without nosuid, nodev or noexec. Every backend must pass them
// unchanged; where a runtime differs by nature (gVisor), Subject.OwnKernel
// says so.
func hardeningCases() []testCase {
	return []testCase{
		{name: "seccomp-io-uring-refused", isolated: true, run: testIOUringRefused},
		{name: "seccomp-vsock-refused", isolated: true, run: testVsockRefused},
		{name: "proc-cmdline-masked", isolated: true, run: testProcCmdlineMasked},
		{name: "vmcoreinfo-masked", isolated: true, run: testVmcoreinfoMasked},
		{name: "cgroup-namespace", isolated: true, run: testCgroupNamespace},
		{name: "bind-mount-flags", isolated: true, run: testBindMountFlags},
	}
}

// probeSource is a static program the hardening cases run inside a call,
// since neither busybox nor bash can make the system calls they test.
// "probe io_uring" calls io_uring_setup, "probe vsock" opens an AF_VSOCK
// socket, "probe ok" only answers; each prints "allowed" or "refused
// <errno name>".
const probeSource = `package main

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// sysIOUringSetup is io_uring_setup's number on every architecture.
const sysIOUringSetup = 425

// afVsock is AF_VSOCK.
const afVsock = 40

var names = map[syscall.Errno]string{
	syscall.EPERM: "EPERM", syscall.ENOSYS: "ENOSYS", syscall.EAFNOSUPPORT: "EAFNOSUPPORT",
	syscall.EACCES: "EACCES", syscall.EINVAL: "EINVAL", syscall.ENOMEM: "ENOMEM",
	syscall.EPROTONOSUPPORT: "EPROTONOSUPPORT",
}

func report(errno syscall.Errno) {
	if errno == 0 {
		fmt.Println("allowed")
		return
	}
	name, ok := names[errno]
	if !ok {
		name = fmt.Sprintf("errno %d", int(errno))
	}
	fmt.Println("refused " + name)
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: probe io_uring|vsock|ok")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "io_uring":
		var params [120]byte // struct io_uring_params
		fd, _, errno := syscall.Syscall(sysIOUringSetup, 4, uintptr(unsafe.Pointer(&params[0])), 0)
		if errno == 0 {
			syscall.Close(int(fd))
		}
		report(errno)
	case "vsock":
		fd, err := syscall.Socket(afVsock, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
		if err == nil {
			syscall.Close(fd)
			report(0)
			return
		}
		report(err.(syscall.Errno))
	case "ok":
		fmt.Println("probe ran")
	default:
		fmt.Fprintln(os.Stderr, "unknown probe", os.Args[1])
		os.Exit(2)
	}
}
`

// buildProbe compiles probeSource into a static binary in the
// workspace of fx (mounted read-write and executable in a call at the
// same path) and returns its path. It needs the go command that runs the
// tests; without one the case fails under CI=true and is skipped, with a
// message, otherwise.
func buildProbe(t *testing.T, fx *fixture) string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		goCmd = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, serr := os.Stat(goCmd); serr != nil {
			missing := "the go command (to build the probe binary) is not in PATH or GOROOT"
			if os.Getenv("CI") == "true" {
				t.Fatalf("CI=true but %s", missing)
			}
			t.Skip(missing)
		}
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module probe\n\ngo 1.21\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(probeSource), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(fx.Workspace, "probe")
	cmd := exec.Command(goCmd, "build", "-trimpath", "-o", out, ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=", "GO111MODULE=on", "GOTOOLCHAIN=local",
		"GOOS="+runtime.GOOS, "GOARCH="+runtime.GOARCH)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build probe: %v\n%s", err, msg)
	}
	if err := os.Chmod(out, 0o755); err != nil {
		t.Fatal(err)
	}
	return out
}

// runProbe runs the probe's mode in a call and returns its one line. It
// first checks that the probe runs at all (the legitimate variant: a
// program in the workspace is executable).
func (s *suite) runProbe(t *testing.T, mode string) string {
	t.Helper()
	fx := newFixture(t)
	probe := buildProbe(t, fx)
	req := s.request(fx, shellQuote(probe)+" ok; "+shellQuote(probe)+" "+mode)
	req.Policy.Workspace = "rw"
	res := s.runOK(t, req)
	got := lines(res.Stdout.Text)
	if len(got) != 2 || got[0] != "probe ran" {
		t.Fatalf("probe %s printed %q (stderr %q), want \"probe ran\" and one answer", mode, res.Stdout.Text, res.Stderr.Text)
	}
	return got[1]
}

// testIOUringRefused: io_uring_setup fails (EPERM from the seccomp
// profile, or ENOSYS where the kernel or the profile says it does not
// exist); io_uring bypasses the seccomp filtering of the operations it
// performs.
func testIOUringRefused(t *testing.T, s *suite) {
	got := s.runProbe(t, "io_uring")
	if got != "refused EPERM" && got != "refused ENOSYS" {
		t.Errorf("io_uring_setup inside: %q, want refused with EPERM or ENOSYS", got)
	}
}

// testVsockRefused: an AF_VSOCK socket cannot be opened (EPERM from the
// seccomp profile); vsock reaches the hypervisor host, outside the
// network namespace. A user-space kernel that lacks the family refuses
// it with EAFNOSUPPORT.
func testVsockRefused(t *testing.T, s *suite) {
	got := s.runProbe(t, "vsock")
	if got == "refused EPERM" || (s.cfg.OwnKernel && got == "refused EAFNOSUPPORT") {
		return
	}
	t.Errorf("socket(AF_VSOCK) inside: %q, want refused with EPERM (OwnKernel %v)", got, s.cfg.OwnKernel)
}

// maskedFile runs a call that reports whether file exists, how many
// bytes of it are readable and what they are, and whether a mount covers
// it; the legitimate variant, /proc/self/status, must stay readable.
func (s *suite) maskedFile(t *testing.T, file string) (content string, exists bool) {
	t.Helper()
	fx := newFixture(t)
	res := s.runOK(t, s.request(fx, `f=`+shellQuote(file)+`
grep -q '^Name:' /proc/self/status && echo status-readable
if [ -e "$f" ]; then echo exists; echo "content:$(head -c 4096 "$f" 2>/dev/null | tr '\n' ' ')"; fi`))
	out := lines(res.Stdout.Text)
	if len(out) == 0 || out[0] != "status-readable" {
		t.Fatalf("/proc/self/status is not readable inside: %q", res.Stdout.Text)
	}
	for _, l := range out[1:] {
		if l == "exists" {
			exists = true
		}
		if c, ok := strings.CutPrefix(l, "content:"); ok {
			content = strings.TrimSpace(c)
		}
	}
	return content, exists
}

// hostFile returns file's content on the host, spaces for newlines and
// trimmed, or "" when it cannot be read.
func hostFile(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\n", " "))
}

// testProcCmdlineMasked: /proc/cmdline (the host's boot parameters) reads
// as empty; a user-space kernel may show its own boot line instead, never
// the host's.
func testProcCmdlineMasked(t *testing.T, s *suite) {
	content, _ := s.maskedFile(t, "/proc/cmdline")
	host := hostFile("/proc/cmdline")
	switch {
	case content == "":
	case s.cfg.OwnKernel && (host == "" || !strings.Contains(content, host)):
		t.Logf("/proc/cmdline inside is the runtime's own: %q", content)
	default:
		t.Errorf("/proc/cmdline inside reads %q, want it masked (empty)", short(content))
	}
}

// testVmcoreinfoMasked: /sys/kernel/vmcoreinfo (kernel addresses for
// crash dumps) is absent or reads as empty.
func testVmcoreinfoMasked(t *testing.T, s *suite) {
	content, exists := s.maskedFile(t, "/sys/kernel/vmcoreinfo")
	if content != "" {
		t.Errorf("/sys/kernel/vmcoreinfo inside reads %q, want it absent or masked (empty)", short(content))
	}
	if !exists {
		t.Logf("/sys/kernel/vmcoreinfo is absent inside")
	}
}

// testCgroupNamespace: /proc/self/cgroup shows every hierarchy at "/"
// (a cgroup namespace rooted at the call's cgroup), never the host's
// path, which names the service's instance and the call.
func testCgroupNamespace(t *testing.T, s *suite) {
	fx := newFixture(t)
	res := s.runOK(t, s.request(fx, "cat /proc/self/cgroup; echo end"))
	out := lines(res.Stdout.Text)
	if len(out) == 0 || out[len(out)-1] != "end" {
		t.Fatalf("cat /proc/self/cgroup printed %q, want the file then \"end\"", res.Stdout.Text)
	}
	for _, l := range out[:len(out)-1] {
		// hierarchy-ID:controllers:path
		f := strings.SplitN(l, ":", 3)
		if len(f) != 3 || f[2] != "/" {
			t.Errorf("/proc/self/cgroup line %q: want the path \"/\" (a cgroup namespace of the call's own)", l)
		}
	}
	if len(out) == 1 {
		t.Logf("/proc/self/cgroup is empty inside (no cgroup hierarchy visible)")
	}
}

// testBindMountFlags: the workspace is mounted nosuid and nodev (and
// still writable and executable: the legitimate variant), the transcript
// directory nosuid, nodev, noexec and read-only, as /proc/self/mountinfo
// inside says of the mounts at their paths.
func testBindMountFlags(t *testing.T, s *suite) {
	fx := newFixture(t)
	probe := buildProbe(t, fx)
	req := s.request(fx, shellQuote(probe)+" ok && echo w > "+shellQuote(filepath.Join(fx.Workspace, "written"))+" && echo wrote; cat /proc/self/mountinfo")
	req.Policy.Workspace, req.Policy.Transcript = "rw", "ro"
	res := s.runOK(t, req)
	out := lines(res.Stdout.Text)
	if len(out) < 2 || out[0] != "probe ran" || out[1] != "wrote" {
		t.Fatalf("running and writing in the workspace printed %q (stderr %q), want \"probe ran\", \"wrote\"", short(res.Stdout.Text), res.Stderr.Text)
	}
	opts := mountOptions(out[2:])
	for _, m := range []struct {
		path string
		want []string
		not  []string
	}{
		{fx.Workspace, []string{"nosuid", "nodev", "rw"}, []string{"noexec", "ro"}},
		{fx.TranscriptDir, []string{"nosuid", "nodev", "noexec", "ro"}, nil},
	} {
		got, ok := opts[m.path]
		if !ok {
			t.Errorf("/proc/self/mountinfo inside has no mount at %s", m.path)
			continue
		}
		for _, o := range m.want {
			if !got[o] && s.cfg.OwnKernel && (o == "nosuid" || o == "nodev") {
				// gVisor's mountinfo lists only rw/ro and noexec of a
				// mount's flags, so these cannot be read from inside;
				// the runtime is given them in the spec (the oci
				// backend's spec tests check that), and no_new_privs
				// keeps a set-user-ID bit from granting anything.
				t.Logf("mount %s inside has options %v: %s not listed by this kernel", m.path, keys(got), o)
				continue
			}
			if !got[o] {
				t.Errorf("mount %s inside has options %v, want %s", m.path, keys(got), o)
			}
		}
		for _, o := range m.not {
			if got[o] {
				t.Errorf("mount %s inside has options %v, want no %s", m.path, keys(got), o)
			}
		}
	}
}

// mountOptions maps each mount point of mountinfo lines to its per-mount
// options (the last mount at a path wins: it is the one seen).
func mountOptions(info []string) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	for _, l := range info {
		f := strings.Fields(l)
		if len(f) < 6 {
			continue
		}
		set := map[string]bool{}
		for _, o := range strings.Split(f[5], ",") {
			set[o] = true
		}
		out[unescapeOctal(f[4])] = set
	}
	return out
}

// unescapeOctal undoes mountinfo's \NNN escapes.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// keys lists a set's members, sorted, for messages.
func keys(set map[string]bool) []string {
	return slices.Sorted(maps.Keys(set))
}
