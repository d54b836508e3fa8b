package sandboxtest

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func TestCasesNames(t *testing.T) {
	names := Cases()
	if len(names) < 40 {
		t.Errorf("len(Cases()) = %d, want at least 40", len(names))
	}
	valid := regexp.MustCompile(`^[a-z0-9]+(-[a-z0-9]+)*$`)
	seen := map[string]bool{}
	for _, n := range names {
		if !valid.MatchString(n) {
			t.Errorf("case name %q, want lower-case words joined by '-' (a stable -run pattern)", n)
		}
		if seen[n] {
			t.Errorf("case name %q is used twice", n)
		}
		seen[n] = true
	}
	for _, required := range []string{
		"env-exact", "env-stale-dsh-dropped", "env-secret-inherit-dropped", "env-ordinary-cannot-displace-dsh",
		"workdir-default", "workdir-explicit", "stdin-bytes", "exit-code-0", "exit-code-1", "exit-code-42",
		"exit-code-255", "signal-term", "signal-kill", "timeout-kills-all", "cancel-aborts",
		"output-tail-truncation", "output-binary", "output-200mb-bounded-memory", "transcript-readonly",
		"transcript-live-append", "sessions-other-invisible", "workspace-rw", "workspace-ro", "network-none",
		"caps-none", "no-new-privs", "seccomp-filter", "rootfs-readonly", "tmp-writable", "pids-limit",
		"memory-limit", "proc-kcore-masked", "etc-shadow-absent", "root-home-absent", "hostname-isolated",
		"pid-namespace", "parallel-sessions-32", "jobs-start-output-kill", "leftovers-after-200-calls",
		"invalid-negative-timeout", "invalid-nul-in-env", "invalid-relative-workdir", "result-sandbox-info",
	} {
		if !seen[required] {
			t.Errorf("Cases() lacks %q", required)
		}
	}
	if last := names[len(names)-1]; last != "leftovers-final" {
		t.Errorf("last case = %q, want leftovers-final", last)
	}
}

func TestWatchWriterFiresOnceAcrossWrites(t *testing.T) {
	n := 0
	w := newWatchWriter("ready", func() { n++ })
	for _, p := range []string{"abc re", "a", "dy\nmore ready", "ready"} {
		if got, err := w.Write([]byte(p)); got != len(p) || err != nil {
			t.Errorf("Write(%q) = %d, %v, want %d, nil", p, got, err, len(p))
		}
	}
	if n != 1 || !w.fired() {
		t.Errorf("trigger split across writes fired %d times (fired() = %v), want once", n, w.fired())
	}
	quiet := newWatchWriter("ready", func() { t.Error("fired without the trigger") })
	quiet.Write(bytes.Repeat([]byte("read"), 1000))
	if quiet.fired() {
		t.Errorf("fired() = true without the trigger")
	}
}

func TestNewMarkerCases(t *testing.T) {
	a, b := newMarker(), newMarker()
	for _, m := range []string{a, b} {
		if len(m) != 9 || strings.Trim(m, "0123456789") != "" || m[0] == '0' {
			t.Errorf("newMarker() = %q, want nine digits not starting with 0", m)
		}
	}
	if a == b {
		t.Errorf("newMarker() twice = %q, want different markers", a)
	}
}

func TestHostProcsWithFindsAndSkips(t *testing.T) {
	marker := newMarker()
	cmd := exec.Command("sleep", marker)
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start sleep: %v", err)
	}
	got := hostProcsWith(marker)
	if len(got) != 1 || !strings.HasPrefix(got[0], "pid "+strconv.Itoa(cmd.Process.Pid)+": sleep "+marker) {
		t.Errorf("hostProcsWith(%q) = %q, want the sleep process %d", marker, got, cmd.Process.Pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if got := hostProcsWith(marker); len(got) != 0 {
		t.Errorf("hostProcsWith(%q) after the process ended = %q, want none", marker, got)
	}
	// This process holds the marker in memory, never in its command line.
	if got := hostProcsWith(strconv.Itoa(os.Getpid()) + "-" + marker); len(got) != 0 {
		t.Errorf("hostProcsWith(unused marker) = %q, want none", got)
	}
}

func TestShellQuoteCases(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain", "'plain'"},
		{"it's", `'it'\''s'`},
		{"", "''"},
		{"$HOME `x`", "'$HOME `x`'"},
	} {
		if got := shellQuote(tc.in); got != tc.want {
			t.Errorf("shellQuote(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestPrintfAllBytesCovers256Values(t *testing.T) {
	cmd := printfAllBytes()
	if got := strings.Count(cmd, `\`); got != 256 {
		t.Errorf("printfAllBytes() has %d escapes, want 256", got)
	}
	if !strings.Contains(cmd, `\000`) || !strings.Contains(cmd, `\377`) || !strings.Contains(cmd, `\047`) {
		t.Errorf("printfAllBytes() = %q, want octal escapes from \\000 to \\377, including the quote \\047", short(cmd))
	}
}

func TestSeqOutputCases(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, ""}, {1, "1\n"}, {3, "1\n2\n3\n"}} {
		if got := seqOutput(tc.n); got != tc.want {
			t.Errorf("seqOutput(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
	if got := len(seqOutput(1000)); got != 3893 {
		t.Errorf("len(seqOutput(1000)) = %d, want 3893", got)
	}
}
