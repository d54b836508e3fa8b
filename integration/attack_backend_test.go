//go:build integration

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// attackProbe is a static program the backend attack tests run inside a
// call: busybox and bash cannot make the system calls they try.
// "io_uring" calls io_uring_setup, "vsock" opens an AF_VSOCK socket, "ok"
// only answers; each prints "allowed" or "refused <errno>".
const attackProbe = `package main

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

func report(errno syscall.Errno) {
	switch errno {
	case 0:
		fmt.Println("allowed")
	case syscall.EPERM:
		fmt.Println("refused EPERM")
	case syscall.ENOSYS:
		fmt.Println("refused ENOSYS")
	default:
		fmt.Printf("refused errno %d\n", int(errno))
	}
}

func main() {
	switch os.Args[1] {
	case "io_uring":
		var params [120]byte
		fd, _, errno := syscall.Syscall(425, 4, uintptr(unsafe.Pointer(&params[0])), 0)
		if errno == 0 {
			syscall.Close(int(fd))
		}
		report(errno)
	case "vsock":
		fd, err := syscall.Socket(40, syscall.SOCK_STREAM, 0)
		if err == nil {
			syscall.Close(fd)
			report(0)
			return
		}
		report(err.(syscall.Errno))
	case "ok":
		fmt.Println("probe ran")
	}
}
`

// buildAttackProbe builds attackProbe statically into dir/probe.
func buildAttackProbe(t *testing.T, dir string) {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module probe\n\ngo 1.21\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(attackProbe), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "probe"), ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build probe: %v\n%s", err, out)
	}
}

// TestAttackBackendHardening: on every backend, a call that tries
// io_uring, an AF_VSOCK socket, the host's boot line and crash-dump
// addresses, and its host cgroup path gets none of them, while the
// legitimate parts of the same call (running a program from the
// workspace, reading /proc/self/status) work.
func TestAttackBackendHardening(t *testing.T) {
	requireDaemons(t)
	e := newEnv(t)
	name := "dsh-itest-busybox:1"
	importEverywhere(t, e, testImageTar(t), name)
	buildAttackProbe(t, e.workspace)
	command := `./probe ok; ./probe io_uring; ./probe vsock; ` +
		`echo "cmdline $(head -c 4096 /proc/cmdline 2>/dev/null | wc -c)"; ` +
		`echo "vmcoreinfo $(head -c 4096 /sys/kernel/vmcoreinfo 2>/dev/null | wc -c)"; ` +
		`grep -c '^Name:' /proc/self/status; echo ---; cat /proc/self/cgroup`
	// runsc is checked by the conformance suite (sandboxtest's OwnKernel
	// expectations): gVisor answers these probes from its own kernel.
	for _, target := range [][]string{{"oci"}, {"oci", "crun"}, {"docker"}, {"containerd"}} {
		b := strings.Join(target, "/")
		args := append(append([]string{"exec"}, e.flags("s1")...), daemonFlags()...)
		args = append(args, "--backend", target[0])
		if len(target) > 1 {
			args = append(args, "--runtime", target[1])
		}
		r := run(t, nil, append(args, "--image", name, "--", command)...)
		if r.code != 0 {
			t.Errorf("exec --backend %s exited %d: %s", b, r.code, r.stderr)
			continue
		}
		head, cgroups, ok := strings.Cut(r.stdout, "---\n")
		got := strings.Split(strings.TrimSpace(head), "\n")
		if !ok || len(got) != 6 {
			t.Errorf("exec --backend %s printed %q, want 6 lines, ---, the cgroups", b, r.stdout)
			continue
		}
		if got[0] != "probe ran" || got[5] != "1" {
			t.Errorf("--backend %s: the legitimate part failed: probe %q, /proc/self/status %q", b, got[0], got[5])
		}
		if got[1] != "refused EPERM" && got[1] != "refused ENOSYS" {
			t.Errorf("--backend %s: io_uring_setup %q, want refused", b, got[1])
		}
		if got[2] != "refused EPERM" {
			t.Errorf("--backend %s: socket(AF_VSOCK) %q, want refused EPERM", b, got[2])
		}
		if got[3] != "cmdline 0" || got[4] != "vmcoreinfo 0" {
			t.Errorf("--backend %s: %q, %q; want 0 bytes readable of each", b, got[3], got[4])
		}
		for _, l := range strings.Split(strings.TrimSpace(cgroups), "\n") {
			if !strings.HasSuffix(l, ":/") {
				t.Errorf("--backend %s: /proc/self/cgroup line %q, want the path / (a cgroup namespace)", b, l)
			}
		}
	}
}

// TestAttackBackendOOMReported: on every backend, a call that exhausts a
// 64 MiB limit ends with exit 137 and "oomKilled":true in `exec --json`,
// and an ordinary call under the same policy says false.
func TestAttackBackendOOMReported(t *testing.T) {
	requireDaemons(t)
	e := newEnv(t)
	name := "dsh-itest-busybox:1"
	importEverywhere(t, e, testImageTar(t), name)
	pol := filepath.Join(t.TempDir(), "oom.yaml")
	if err := os.WriteFile(pol, []byte("name: oom-64mi\nlimits: {memory: 64Mi}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		ExitCode  *int   `json:"exitCode"`
		Signal    string `json:"signal"`
		OOMKilled *bool  `json:"oomKilled"`
	}
	for _, target := range [][]string{{"oci"}, {"oci", "crun"}, {"oci", "runsc"}, {"docker"}, {"containerd"}} {
		b := strings.Join(target, "/")
		for _, tc := range []struct {
			command string
			code    int
			oom     bool
		}{
			{`x=$(head -c 200000000 /dev/zero | tr '\0' a); echo "survived ${#x}"`, 137, true},
			{`x=$(head -c 1000000 /dev/zero | tr '\0' a); echo "held ${#x}"`, 0, false},
		} {
			args := append(append([]string{"exec", "--json", "--policy", pol}, e.flags("s1")...), daemonFlags()...)
			args = append(args, "--backend", target[0])
			if len(target) > 1 {
				args = append(args, "--runtime", target[1])
			}
			r := run(t, nil, append(args, "--image", name, "--", tc.command)...)
			var res outcome
			if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.OOMKilled == nil {
				t.Errorf("exec --backend %s --json printed %q (%v), want a result with oomKilled", b, r.stdout, err)
				continue
			}
			if r.code != tc.code || *res.OOMKilled != tc.oom {
				t.Errorf("exec --backend %s %q: exit %d, oomKilled %v (signal %q); want exit %d, oomKilled %v",
					b, tc.command, r.code, *res.OOMKilled, res.Signal, tc.code, tc.oom)
			}
			if tc.oom && !strings.Contains(r.stdout, `"oomKilled":true`) {
				t.Errorf("exec --backend %s --json printed %q, want \"oomKilled\":true", b, r.stdout)
			}
		}
	}
}
