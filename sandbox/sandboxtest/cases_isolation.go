package sandboxtest

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// isolationCases check the container shape of DESIGN §3.8: namespaces,
// privileges, read-only root, masked host files and resource limits.
func isolationCases() []testCase {
	return []testCase{
		{name: "network-none", isolated: true, run: testNetworkNone},
		{name: "caps-none", isolated: true, run: testCapsNone},
		{name: "no-new-privs", isolated: true, run: testNoNewPrivs},
		{name: "seccomp-filter", isolated: true, run: statusCase("Seccomp", "2")},
		{name: "user-auto-owner", isolated: true, run: testUserAutoOwner},
		{name: "rootfs-readonly", isolated: true, run: testRootfsReadonly},
		{name: "host-dirs-readonly", isolated: true, run: testHostDirsReadonly},
		{name: "tmp-writable", run: testTmpWritable},
		{name: "tmp-fresh-per-call", isolated: true, run: testTmpFreshPerCall},
		{name: "pids-limit", isolated: true, run: testPidsLimit},
		{name: "memory-limit", isolated: true, run: testMemoryLimit},
		{name: "proc-kcore-masked", isolated: true, run: testProcKcoreMasked},
		{name: "etc-shadow-absent", isolated: true, run: testEtcShadowAbsent},
		{name: "root-home-absent", isolated: true, run: testRootHomeAbsent},
		{name: "hostname-isolated", isolated: true, run: testHostnameIsolated},
		{name: "pid-namespace", isolated: true, run: testPidNamespace},
	}
}

// testNetworkNone: the only network interface is lo.
func testNetworkNone(t *testing.T, s *suite) {
	fx := newFixture(t)
	res := s.runOK(t, s.request(fx, "cat /proc/net/dev"))
	var ifaces []string
	for _, l := range lines(res.Stdout.Text) {
		if name, _, ok := strings.Cut(l, ":"); ok {
			ifaces = append(ifaces, strings.TrimSpace(name))
		}
	}
	if len(ifaces) != 1 || ifaces[0] != "lo" {
		t.Errorf("network interfaces inside = %q, want only lo", ifaces)
	}
}

// procStatus runs `cat /proc/self/status` in a call and returns its
// fields.
func (s *suite) procStatus(t *testing.T, fx *fixture) map[string]string {
	t.Helper()
	res := s.runOK(t, s.request(fx, "cat /proc/self/status"))
	m := make(map[string]string)
	for _, l := range lines(res.Stdout.Text) {
		if k, v, ok := strings.Cut(l, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// testCapsNone: every capability set of the process is empty.
func testCapsNone(t *testing.T, s *suite) {
	fx := newFixture(t)
	st := s.procStatus(t, fx)
	for _, k := range []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"} {
		v, ok := st[k]
		if !ok && k == "CapAmb" {
			t.Logf("/proc/self/status has no CapAmb (e.g. gVisor); ambient set not checked")
			continue
		}
		if !ok {
			t.Errorf("/proc/self/status has no %s", k)
			continue
		}
		if n, err := strconv.ParseUint(v, 16, 64); err != nil || n != 0 {
			t.Errorf("/proc/self/status %s = %q, want 0", k, v)
		}
	}
}

// statusCase: /proc/self/status field key has value want.
func statusCase(key, want string) func(*testing.T, *suite) {
	return func(t *testing.T, s *suite) {
		fx := newFixture(t)
		if got := s.procStatus(t, fx)[key]; got != want {
			t.Errorf("/proc/self/status %s = %q, want %q", key, got, want)
		}
	}
}

// testNoNewPrivs: the process has no_new_privs set, as
// /proc/self/status says or, where that has no NoNewPrivs line (gVisor),
// as prctl(PR_GET_NO_NEW_PRIVS) says through `setpriv --dump`.
func testNoNewPrivs(t *testing.T, s *suite) {
	fx := newFixture(t)
	res := s.runOK(t, s.request(fx, `if grep -q '^NoNewPrivs:' /proc/self/status; then
  grep '^NoNewPrivs:' /proc/self/status
else
  setpriv --dump 2>/dev/null | grep '^no_new_privs:' || echo "no way to read no_new_privs"
fi`))
	got := strings.Join(strings.Fields(res.Stdout.Text), " ")
	if got != "NoNewPrivs: 1" && got != "no_new_privs: 1" && got != "no_new_privs: on" {
		t.Errorf("no_new_privs inside: %q, want it set (NoNewPrivs 1)", got)
	}
}

// testUserAutoOwner: the process runs as the policy's user — for `auto`
// the workspace's owner — with no supplementary groups.
func testUserAutoOwner(t *testing.T, s *suite) {
	fx := newFixture(t)
	st := s.procStatus(t, fx)
	wantUID := strconv.FormatUint(uint64(ownerUID(t, fx.Workspace)), 10)
	if u := s.cfg.Policy.User; u != "auto" {
		uid, _, ok := strings.Cut(string(u), ":")
		if !ok {
			t.Fatalf("policy user %q is neither auto nor uid:gid", u)
		}
		wantUID = uid
	}
	if got := strings.Fields(st["Uid"]); len(got) != 4 || got[0] != wantUID || got[1] != wantUID || got[2] != wantUID || got[3] != wantUID {
		t.Errorf("/proc/self/status Uid = %q, want %s for real, effective, saved and fs uid", st["Uid"], wantUID)
	}
	// No supplementary groups beyond the primary one: the Docker engine
	// always lists the primary gid there too (it grants nothing more).
	gid := strings.Fields(st["Gid"])
	if g := strings.TrimSpace(st["Groups"]); g != "" && (len(gid) == 0 || g != gid[0]) {
		t.Errorf("/proc/self/status Groups = %q, want none besides the primary gid %v", g, gid)
	}
}

// testRootfsReadonly: the root filesystem cannot be written.
func testRootfsReadonly(t *testing.T, s *suite) {
	fx := newFixture(t)
	name := "/sandboxtest-root-" + randomHex(4)
	t.Cleanup(func() { os.Remove(name); os.Remove(name + "-d") }) // in case they reached the host
	res := s.runOK(t, s.request(fx, "touch "+name+" 2>/dev/null && echo WROTE; mkdir "+name+"-d 2>/dev/null && echo MADE; echo done"))
	if res.Stdout.Text != "done\n" {
		t.Errorf("writing to / printed %q, want only %q (read-only root)", res.Stdout.Text, "done\n")
	}
	if _, err := os.Stat(name); err == nil {
		t.Errorf("%s exists on the host after the call", name)
	}
}

// testHostDirsReadonly: the host directories an image shows (/usr, /bin,
// /lib, /etc, …) cannot be written.
func testHostDirsReadonly(t *testing.T, s *suite) {
	fx := newFixture(t)
	dirs := []string{"/usr", "/usr/bin", "/bin", "/sbin", "/lib", "/etc", "/usr/local"}
	base := ".sandboxtest-" + randomHex(4)
	var b strings.Builder
	for _, d := range dirs {
		p := d + "/" + base
		t.Cleanup(func() { os.Remove(p) }) // in case it reached the host
		fmt.Fprintf(&b, "[ -d %s ] && touch %s 2>/dev/null && echo 'WROTE %s'\n", d, p, d)
	}
	b.WriteString("echo done")
	res := s.runOK(t, s.request(fx, b.String()))
	if res.Stdout.Text != "done\n" {
		t.Errorf("writing to host directories printed %q, want only %q", res.Stdout.Text, "done\n")
	}
}

// testTmpWritable: /tmp takes writes (and, in a container, is a sticky
// world-writable tmpfs).
func testTmpWritable(t *testing.T, s *suite) {
	fx := newFixture(t)
	name := "/tmp/sandboxtest-" + randomHex(4)
	t.Cleanup(func() { os.Remove(name) }) // the local baseline writes the host's /tmp
	cmd := "echo hi > " + name + " && cat " + name + "; rm -f " + name
	if s.cfg.Isolated {
		// find, not stat: gVisor rejects the statx flags coreutils uses.
		cmd += "; find /tmp -maxdepth 0 -perm -1777"
	}
	res := s.runOK(t, s.request(fx, cmd))
	want := "hi\n"
	if s.cfg.Isolated {
		want += "/tmp\n" // sticky and writable by all
	}
	if res.Stdout.Text != want {
		t.Errorf("stdout = %q, want %q", res.Stdout.Text, want)
	}
}

// testTmpFreshPerCall: nothing written to /tmp survives into the next
// call or reaches the host's /tmp.
func testTmpFreshPerCall(t *testing.T, s *suite) {
	fx := newFixture(t)
	name := "/tmp/sandboxtest-" + randomHex(4)
	t.Cleanup(func() { os.Remove(name) })
	s.runOK(t, s.request(fx, "echo first > "+name))
	res := s.runOK(t, s.request(fx, "test -e "+name+" && echo STILL-THERE; echo done"))
	if res.Stdout.Text != "done\n" {
		t.Errorf("second call printed %q, want %q (a fresh /tmp per call)", res.Stdout.Text, "done\n")
	}
	if _, err := os.Stat(name); err == nil {
		t.Errorf("%s reached the host's /tmp", name)
	}
}

// testPidsLimit: with limits.pids 64, a loop starting 200 background
// sleeps gets fewer than 64 of them, and the call still returns (on its
// timeout, as the shell retries failed forks).
func testPidsLimit(t *testing.T, s *suite) {
	fx := newFixture(t)
	marker := newMarker()
	req := s.request(fx, `i=0
while [ $i -lt 200 ]; do
  sleep `+marker+` &
  i=$((i+1))
  echo "started $i"
done
echo loop-done
wait`)
	req.Policy.Limits.Pids = 64
	req.TimeoutMs = 5000
	res := s.run(t, req)
	started := strings.Count(res.Stdout.Text, "started ")
	if started < 1 || started >= 64 {
		t.Errorf("%d background sleeps started under a limit of 64 pids, want 1–63 (%s)", started, describe(res))
	}
	if strings.Contains(res.Stdout.Text, "loop-done") {
		t.Errorf("all 200 background sleeps started under a limit of 64 pids")
	}
	checkNoSurvivors(t, marker)
}

// testMemoryLimit: with limits.memory 64 MiB, holding 300 MB in a shell
// variable gets the call killed (exit status 137).
func testMemoryLimit(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, `x=$(head -c 300000000 /dev/zero | tr '\0' a); echo "survived ${#x}"`)
	req.Policy.Limits.MemoryBytes = 64 << 20
	res := s.run(t, req)
	if res.Signal != "SIGKILL" && (res.ExitCode == nil || *res.ExitCode != 137) {
		t.Errorf("Run(allocate 300 MB under 64 MiB) = %s, want killed by SIGKILL (137)", describe(res))
	}
	if strings.Contains(res.Stdout.Text, "survived") {
		t.Errorf("stdout = %q: the allocation succeeded under a 64 MiB limit", res.Stdout.Text)
	}
}

// testProcKcoreMasked: /proc/kcore is absent, or masked and empty.
func testProcKcoreMasked(t *testing.T, s *suite) {
	fx := newFixture(t)
	res := s.runOK(t, s.request(fx, `if [ -e /proc/kcore ]; then
  echo "bytes $(head -c 16 /proc/kcore 2>/dev/null | wc -c)"
  echo "mounts $(grep -c ' /proc/kcore ' /proc/self/mountinfo)"
else
  echo absent
fi`))
	got := strings.Join(strings.Fields(res.Stdout.Text), " ")
	if got == "absent" {
		return
	}
	var n, mounts int
	if _, err := fmt.Sscanf(got, "bytes %d mounts %d", &n, &mounts); err != nil || n != 0 || mounts < 1 {
		t.Errorf("/proc/kcore inside: %q, want it absent, or masked by a mount and empty", got)
	}
}

// testEtcShadowAbsent: the host's /etc/shadow, /etc/gshadow and
// /etc/sudoers are not visible; an OCI image may carry its own shadow
// file but never the host's.
func testEtcShadowAbsent(t *testing.T, s *suite) {
	fx := newFixture(t)
	files := []string{"/etc/shadow", "/etc/gshadow", "/etc/sudoers"}
	for _, f := range files {
		res := s.runOK(t, s.request(fx, "if [ -e "+f+" ]; then echo present; cat "+f+" 2>/dev/null; fi; true"))
		if res.Stdout.Text == "" {
			continue
		}
		if s.cfg.Policy.Image == "host" {
			t.Errorf("%s is present inside the host image", f)
			continue
		}
		if host, err := os.ReadFile(f); err == nil && len(host) > 0 && strings.Contains(res.Stdout.Text, string(host)) {
			t.Errorf("the host's %s is visible inside", f)
		}
	}
}

// testRootHomeAbsent: /root and /home are absent or empty.
func testRootHomeAbsent(t *testing.T, s *suite) {
	fx := newFixture(t)
	res := s.runOK(t, s.request(fx, `for d in /root /home; do
  for f in "$d"/* "$d"/.[!.]* "$d"/..?*; do [ -e "$f" ] && echo "$f"; done
done; true`))
	if res.Stdout.Text != "" {
		t.Errorf("/root and /home inside hold %q, want them absent or empty", lines(res.Stdout.Text))
	}
}

// testHostnameIsolated: the container has its own hostname.
func testHostnameIsolated(t *testing.T, s *suite) {
	fx := newFixture(t)
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	res := s.runOK(t, s.request(fx, "cat /proc/sys/kernel/hostname"))
	if got := strings.TrimSpace(res.Stdout.Text); got == "" || got == host {
		t.Errorf("hostname inside = %q, want a non-empty name other than the host's %q", got, host)
	}
}

// testPidNamespace: the call sees only its own few processes.
func testPidNamespace(t *testing.T, s *suite) {
	fx := newFixture(t)
	res := s.runOK(t, s.request(fx, `n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n`))
	n, err := strconv.Atoi(strings.TrimSpace(res.Stdout.Text))
	if err != nil || n < 1 || n >= 10 {
		t.Errorf("processes visible inside = %q, want 1–9 (a pid namespace of its own)", res.Stdout.Text)
	}
	if host, err := os.ReadDir("/proc"); err == nil && n > 0 {
		t.Logf("%d processes inside, %d /proc entries on the host", n, len(host))
	}
}
