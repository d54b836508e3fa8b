package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/api/types"
	"github.com/dsh-sandbox/dsh-sandbox/policy"
)

// TestServerNarrowsPolicy: the per-call fields of a run or job request
// narrow the policy the executor gets; asking more than the policy
// allows is refused with 400 naming the field, and nothing runs.
func TestServerNarrowsPolicy(t *testing.T) {
	f := newFixture(t, &fakeExec{}, nil)
	cases := []struct{ name, extra, field string }{
		{"MoreMemory", `"memoryBytes":1099511627776`, "memoryBytes"},
		{"NegativeMemory", `"memoryBytes":-1`, "memoryBytes"},
		{"TinyMemory", `"memoryBytes":1024`, "memoryBytes"},
		{"MoreCPUs", `"cpus":64`, "cpus"},
		{"NegativeCPUs", `"cpus":-0.5`, "cpus"},
		{"MorePids", `"pids":100000`, "pids"},
		{"Loopback", `"network":"loopback"`, "network"},
		{"UnknownNetwork", `"network":"host"`, "network"},
		{"Mount", `"mounts":[{"source":"/srv","target":"/srv","readOnly":true}]`, "mounts"},
	}
	for _, tc := range cases {
		body := `{"policy":"workspace-write","command":"x","cwd":"` + f.work + `",` + tc.extra + `}`
		for _, path := range []string{"/v1/run", "/v1/jobs"} {
			status, _, got := rawPost(t, f.sock, path, body, nil)
			if status != 400 || !strings.Contains(got, `"field":"`+tc.field+`"`) {
				t.Errorf("%s: POST %s = %d %s, want 400 naming %s", tc.name, path, status, got, tc.field)
			}
		}
	}
	if n := f.exec.calls.Load(); n != 0 {
		t.Fatalf("executor ran %d calls for refused requests, want 0", n)
	}

	base, _ := policy.Builtin(policy.WorkspaceWrite)
	_, err := f.cl.Run(context.Background(), types.RunRequest{Policy: policy.WorkspaceWrite, Command: "ls", Cwd: f.work,
		MemoryBytes: 512 << 20, CPUs: 0.5, Pids: 64, Network: "none"})
	if err != nil {
		t.Fatalf("Run with narrowing fields = %v", err)
	}
	got := f.exec.lastRequest().Policy
	if l := got.Limits; l.MemoryBytes != 512<<20 || l.CPUs != 0.5 || l.Pids != 64 || got.Network != "none" || got.Name != base.Name {
		t.Errorf("executor got policy %s limits %+v network %s; want 512Mi, 0.5 CPUs, 64 pids, none", got.Name, l, got.Network)
	}
	if err := policy.Validate(got); err != nil {
		t.Errorf("narrowed policy invalid: %v", err)
	}
	// Without narrowing fields the policy is the service's, unchanged.
	if _, err := f.cl.Run(context.Background(), types.RunRequest{Policy: policy.WorkspaceWrite, Command: "ls", Cwd: f.work}); err != nil {
		t.Fatal(err)
	}
	want, err := policy.Normalize(base)
	if err != nil {
		t.Fatal(err)
	}
	if p := f.exec.lastRequest().Policy; p.Digest != want.Digest {
		t.Errorf("executor got policy %s without narrowing, want the service's %s", p.Digest, want.Digest)
	}
}
