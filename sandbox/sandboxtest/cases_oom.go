package sandboxtest

import (
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox/render"
)

// oomCases check that a call the out-of-memory killer ends is reported
// as such (Result.OOMKilled), and that no other call is.
func oomCases() []testCase {
	return []testCase{
		{name: "oom-killed-reported", isolated: true, run: testOOMKilledReported},
		{name: "oom-not-reported", run: testOOMNotReported},
	}
}

// oomLimit is the memory limit of the OOM cases.
const oomLimit = 64 << 20

// testOOMKilledReported: with limits.memory 64 MiB, a shell holding
// 200 MB in a variable is killed by SIGKILL and the result says it ran
// out of memory, in its JSON field and in the model-facing text.
func testOOMKilledReported(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, `echo allocating; x=$(head -c 200000000 /dev/zero | tr '\0' a); echo "survived ${#x}"`)
	req.Policy.Limits.MemoryBytes = oomLimit
	res := s.run(t, req)
	if res.Signal != "SIGKILL" || res.ExitCode != nil {
		t.Errorf("Run(allocate 200 MB under 64 MiB) = %s, want killed by SIGKILL", describe(res))
	}
	if !res.OOMKilled {
		t.Errorf("Run(allocate 200 MB under 64 MiB).OOMKilled = false, want true (%s)", describe(res))
	}
	if strings.Contains(res.Stdout.Text, "survived") {
		t.Errorf("stdout = %q: the allocation succeeded under a 64 MiB limit", res.Stdout.Text)
	}
	if got, want := render.Result(res), "[killed by signal: SIGKILL (out of memory)]"; !strings.HasSuffix(got, want) {
		t.Errorf("Render(result) = %q, want it to end with %q", got, want)
	}
}

// testOOMNotReported: an ordinary call under the same limit, and one
// killed by SIGKILL for another reason, report no out-of-memory kill.
func testOOMNotReported(t *testing.T, s *suite) {
	fx := newFixture(t)
	req := s.request(fx, `x=$(head -c 1000000 /dev/zero | tr '\0' a); echo "held ${#x}"`)
	req.Policy.Limits.MemoryBytes = oomLimit
	res := s.runOK(t, req)
	if res.Stdout.Text != "held 1000000\n" {
		t.Errorf("stdout = %q, want %q", res.Stdout.Text, "held 1000000\n")
	}
	if res.OOMKilled {
		t.Errorf("Run(hold 1 MB under 64 MiB).OOMKilled = true, want false")
	}
	req = s.request(fx, `kill -KILL $$`)
	req.Policy.Limits.MemoryBytes = oomLimit
	res = s.run(t, req)
	if res.Signal != "SIGKILL" {
		t.Errorf("Run(kill -KILL $$) = %s, want killed by SIGKILL", describe(res))
	}
	if res.OOMKilled {
		t.Errorf("Run(kill -KILL $$).OOMKilled = true, want false")
	}
	if got := render.Result(res); strings.Contains(got, "out of memory") {
		t.Errorf("Render(result) = %q, want no out-of-memory note", got)
	}
}
