package docker

import (
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
)

// defaultEngineSocket is where a Docker engine listens when DOCKER_HOST
// is unset.
const defaultEngineSocket = "/var/run/docker.sock"

// systemContainerdSocket is where dockerd finds a system containerd when
// it is given none (--containerd) and starts none of its own.
const systemContainerdSocket = "/run/containerd/containerd.sock"

// TestMain runs the package's tests and then checks that they left the
// shared daemons alone: the engine that answers $DOCKER_HOST and the
// containerd it uses must be the same processes after the tests as
// before (the fault tests stop and kill only an engine of their own). A
// daemon that was replaced, stopped or started on a shared socket fails
// the run.
func TestMain(m *testing.M) {
	if s, ok := fixtures.SupervisorFromEnv(); ok {
		os.Exit(runLifelineHelper(s))
	}
	// Containers run the stub (stub.go): build it and put it on PATH.
	removeStub, err := fixtures.StubOnPath()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	before := sharedDaemons()
	code := m.Run()
	removeStub()
	after := sharedDaemons()
	if diff := compareDaemons(before, after); diff != "" {
		fmt.Fprintf(os.Stderr, "FAIL: the tests changed a daemon they did not start: %s\n", diff)
		code = 1
	} else if code == 0 && testing.Verbose() {
		fmt.Fprintf(os.Stderr, "shared daemons unchanged: %s\n", describeDaemons(after))
	}
	os.Exit(code)
}

// runningDaemon identifies one running daemon: its PID and its start time (in
// clock ticks since boot), so that a restart that reuses the PID still
// counts as a change. The zero value means that nothing answers.
type runningDaemon struct {
	pid   int
	start uint64
}

func (d runningDaemon) String() string {
	if d.pid == 0 {
		return "none"
	}
	return fmt.Sprintf("pid %d (started at tick %d)", d.pid, d.start)
}

// sharedDaemons returns the daemons the package's tests share, by role:
// "engine" (what answers $DOCKER_HOST or the default socket) and
// "containerd" (the one that engine uses), when it can tell.
func sharedDaemons() map[string]runningDaemon {
	out := map[string]runningDaemon{}
	path, ok := engineSocket()
	if !ok {
		return out
	}
	engine := socketPeer(path)
	out["engine "+path] = engine
	if engine.pid != 0 {
		out["containerd of the engine"] = engineContainerd(engine.pid)
	}
	return out
}

// engineSocket returns the Unix socket of the engine the tests use;
// false when $DOCKER_HOST is not a Unix socket (its process cannot be
// told from here).
func engineSocket() (string, bool) {
	host := os.Getenv("DOCKER_HOST")
	if host == "" {
		return defaultEngineSocket, true
	}
	return strings.CutPrefix(host, "unix://")
}

// compareDaemons describes how after differs from before, "" when not
// at all.
func compareDaemons(before, after map[string]runningDaemon) string {
	var diffs []string
	for role, b := range before {
		if a := after[role]; a != b {
			diffs = append(diffs, fmt.Sprintf("%s was %v, is %v", role, b, a))
		}
	}
	for role, a := range after {
		if _, ok := before[role]; !ok && a.pid != 0 {
			diffs = append(diffs, fmt.Sprintf("%s was not there, is %v", role, a))
		}
	}
	slices.Sort(diffs)
	return strings.Join(diffs, "; ")
}

func describeDaemons(m map[string]runningDaemon) string {
	var parts []string
	for role, d := range m {
		parts = append(parts, role+": "+d.String())
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// socketPeer returns the process that serves the Unix socket at path,
// from the connection's peer credentials; the zero daemon when nothing
// answers.
func socketPeer(path string) runningDaemon {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return runningDaemon{}
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return runningDaemon{}
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return runningDaemon{}
	}
	return processDaemon(int(cred.Pid))
}

// processDaemon returns pid with its start time; the zero daemon when
// the process is gone.
func processDaemon(pid int) runningDaemon {
	fields := procStat(pid)
	// Field 22 of /proc/PID/stat is starttime; fields holds them from
	// field 3 on.
	if len(fields) < 20 {
		return runningDaemon{}
	}
	start, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return runningDaemon{}
	}
	return runningDaemon{pid: pid, start: start}
}

// procStat returns the fields of /proc/PID/stat after the command name
// (state, ppid, …), nil when the process is gone.
func procStat(pid int) []string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}

// engineContainerd finds the containerd the engine with the given PID
// uses: the socket of its --containerd flag, else a containerd child it
// supervises, else a system containerd.
func engineContainerd(pid int) runningDaemon {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return runningDaemon{}
	}
	args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--containerd="); ok {
			return socketPeer(v)
		}
		if a == "--containerd" && i+1 < len(args) {
			return socketPeer(args[i+1])
		}
	}
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		child, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if f := procStat(child); len(f) > 1 && f[1] == strconv.Itoa(pid) && commOf(child) == "containerd" {
			return processDaemon(child)
		}
	}
	return socketPeer(systemContainerdSocket)
}

// commOf returns the command name of pid, "" when gone.
func commOf(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// TestCompareDaemonsCases checks the comparison TestMain relies on.
func TestCompareDaemonsCases(t *testing.T) {
	a := runningDaemon{pid: 10, start: 5}
	for _, tc := range []struct {
		name          string
		before, after map[string]runningDaemon
		changed       bool
	}{
		{"unchanged", map[string]runningDaemon{"engine": a}, map[string]runningDaemon{"engine": a}, false},
		{"none before and after", map[string]runningDaemon{"engine": {}}, map[string]runningDaemon{"engine": {}}, false},
		{"stopped", map[string]runningDaemon{"engine": a}, map[string]runningDaemon{"engine": {}}, true},
		{"restarted", map[string]runningDaemon{"engine": a}, map[string]runningDaemon{"engine": {pid: 11, start: 9}}, true},
		{"same pid, restarted", map[string]runningDaemon{"engine": a}, map[string]runningDaemon{"engine": {pid: 10, start: 9}}, true},
		{"started where none ran", map[string]runningDaemon{"engine": {}}, map[string]runningDaemon{"engine": a}, true},
		{"containerd appeared", map[string]runningDaemon{"engine": a}, map[string]runningDaemon{"engine": a, "containerd": a}, true},
	} {
		if got := compareDaemons(tc.before, tc.after); (got != "") != tc.changed {
			t.Errorf("%s: compareDaemons(%v, %v) = %q, want changed=%v", tc.name, tc.before, tc.after, got, tc.changed)
		}
	}
}

// TestSharedDaemonsSeesEngine checks that TestMain's record of the
// shared engine is real: when an engine answers, it names a live process
// that serves the socket.
func TestSharedDaemonsSeesEngine(t *testing.T) {
	requireEngine(t)
	path, ok := engineSocket()
	if !ok {
		msg := fmt.Sprintf("DOCKER_HOST=%q is not a Unix socket; its process cannot be checked", os.Getenv("DOCKER_HOST"))
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true but " + msg)
		}
		t.Skip(msg)
	}
	d := sharedDaemons()["engine "+path]
	if d.pid == 0 || processDaemon(d.pid) != d {
		t.Fatalf("sharedDaemons() engine on %s = %v, want the live process serving it", path, d)
	}
	if c := sharedDaemons()["containerd of the engine"]; c.pid == 0 {
		t.Errorf("sharedDaemons() finds no containerd of the engine (pid %d)", d.pid)
	}
}
