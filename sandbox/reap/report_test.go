package reap

import (
	"encoding/json"
	"testing"
)

func TestReapReportCase(t *testing.T) {
	tests := []struct {
		name     string
		rep      Report
		removed  int
		empty    bool
		text     string
		wantJSON string
	}{
		{"nothing", Report{}, 0, true, "nothing removed; 0 dead instances",
			`{"instances":[],"containers":[],"bundles":[],"snapshots":[],"images":[],"mounts":[],"cgroups":[],"files":[]}`},
		{"lock only", Report{Instances: []string{"i-1"}}, 0, false, "nothing removed; 1 dead instances",
			`{"instances":["i-1"],"containers":[],"bundles":[],"snapshots":[],"images":[],"mounts":[],"cgroups":[],"files":[]}`},
		{"oci", Report{Instances: []string{"i-1"}, Containers: []string{"c1", "c2"}, Bundles: []string{"/s/b1"}, Mounts: []string{"/s/m"}, Cgroups: []string{"/sys/fs/cgroup/x"}},
			5, false, "2 containers, 1 bundles, 1 mounts, 1 cgroups; 1 dead instances",
			`{"instances":["i-1"],"containers":["c1","c2"],"bundles":["/s/b1"],"snapshots":[],"images":[],"mounts":["/s/m"],"cgroups":["/sys/fs/cgroup/x"],"files":[]}`},
		{"daemons", Report{Containers: []string{"c1"}, Snapshots: []string{"k"}, Images: []string{"sha256:1"}}, 3, false,
			"1 containers, 1 snapshots, 1 unnamed images; 0 dead instances",
			`{"instances":[],"containers":["c1"],"bundles":[],"snapshots":["k"],"images":["sha256:1"],"mounts":[],"cgroups":[],"files":[]}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rep.Removed(); got != tt.removed {
				t.Errorf("Removed() = %d, want %d", got, tt.removed)
			}
			if got := tt.rep.Empty(); got != tt.empty {
				t.Errorf("Empty() = %v, want %v", got, tt.empty)
			}
			if got := tt.rep.String(); got != tt.text {
				t.Errorf("String() = %q, want %q", got, tt.text)
			}
			data, err := json.Marshal(tt.rep)
			if err != nil || string(data) != tt.wantJSON {
				t.Errorf("json.Marshal = %s, %v; want %s", data, err, tt.wantJSON)
			}
		})
	}
}
