package sandbox

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestModesValidCase(t *testing.T) {
	valid := map[string]func(string) bool{
		"workspace":  func(s string) bool { return WorkspaceMode(s).Valid() },
		"transcript": func(s string) bool { return TranscriptMode(s).Valid() },
		"network":    func(s string) bool { return NetworkMode(s).Valid() },
		"runtime":    func(s string) bool { return Runtime(s).Valid() },
		"user":       func(s string) bool { return User(s).Valid() },
	}
	for _, tc := range []struct {
		kind, s string
		ok      bool
	}{
		{"workspace", "rw", true}, {"workspace", "ro", true}, {"workspace", "none", true},
		{"workspace", "RW", false}, {"workspace", "", false}, {"workspace", "rw ", false},
		{"transcript", "ro", true}, {"transcript", "none", true}, {"transcript", "rw", false},
		{"network", "none", true}, {"network", "loopback", true}, {"network", "allowlist", true}, {"network", "host", false},
		{"runtime", "runc", true}, {"runtime", "crun", true}, {"runtime", "runsc", true}, {"runtime", "kata", false}, {"runtime", "", false},
		{"user", "auto", true}, {"user", "host-root", true}, {"user", "1000:1000", true}, {"user", "0:0", true},
		{"user", "4294967295:0", false}, {"user", "1000", false}, {"user", "-1:0", false}, {"user", "root", false}, {"user", "1:2:3", false},
	} {
		if got := valid[tc.kind](tc.s); got != tc.ok {
			t.Errorf("%s %q: Valid() = %v, want %v", tc.kind, tc.s, got, tc.ok)
		}
	}
}

func TestModeMethodsCase(t *testing.T) {
	for _, tc := range []struct {
		m                 WorkspaceMode
		mounted, writable bool
	}{{WorkspaceRW, true, true}, {WorkspaceRO, true, false}, {WorkspaceNone, false, false}, {"", false, false}} {
		if tc.m.Mounted() != tc.mounted || tc.m.Writable() != tc.writable {
			t.Errorf("WorkspaceMode(%q) mounted %v writable %v, want %v %v", tc.m, tc.m.Mounted(), tc.m.Writable(), tc.mounted, tc.writable)
		}
	}
	if !TranscriptRO.Mounted() || TranscriptNone.Mounted() || TranscriptMode("rw").Mounted() {
		t.Errorf("TranscriptMode.Mounted: only ro mounts")
	}
	if !(NetworkNone.Rank() < NetworkLoopback.Rank() && NetworkLoopback.Rank() < NetworkAllowlist.Rank()) || NetworkMode("host").Rank() != -1 {
		t.Errorf("NetworkMode.Rank: want none < loopback < allowlist, -1 for others")
	}
	if uid, gid, auto, err := User("1000:1001").IDs(); uid != 1000 || gid != 1001 || auto || err != nil {
		t.Errorf("User(1000:1001).IDs() = %d, %d, %v, %v", uid, gid, auto, err)
	}
}

// TestModesJSON: the typed modes are spelled in JSON (policy digests,
// golden files, the wire) exactly as the strings they replace.
func TestModesJSON(t *testing.T) {
	p := Policy{Backend: BackendOCI, Runtime: RuntimeRunsc, User: UserHostRoot, Network: NetworkAllowlist, Workspace: WorkspaceRO, Transcript: TranscriptNone}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"backend":"oci"`, `"runtime":"runsc"`, `"user":"host-root"`, `"network":"allowlist"`, `"workspace":"ro"`, `"transcript":"none"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("json.Marshal(policy) = %s, want %s", b, want)
		}
	}
	var q Policy
	if err := json.Unmarshal(b, &q); err != nil || q.Backend != p.Backend || q.Workspace != p.Workspace || q.User != p.User {
		t.Errorf("json round trip = %+v, %v; want %+v", q, err, p)
	}
}
