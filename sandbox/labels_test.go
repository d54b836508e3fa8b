package sandbox

import (
	"maps"
	"os/exec"
	"strings"
	"testing"
)

func TestLabels(t *testing.T) {
	tests := []struct {
		name  string
		extra map[string]string
		want  map[string]string
	}{
		{"no extra", nil, map[string]string{
			LabelOwner: "dsh-sandbox", LabelInstance: "i1", LabelExecution: "call-1", LabelSession: "s1",
		}},
		{"extra kept", map[string]string{"team": "infra"}, map[string]string{
			LabelOwner: "dsh-sandbox", LabelInstance: "i1", LabelExecution: "call-1", LabelSession: "s1", "team": "infra",
		}},
		{"reserved keys in extra cannot forge", map[string]string{
			LabelOwner: "someone-else", LabelSession: "other-session", "DSH-SANDBOX.instance": "x", "dsh-sandbox.custom": "y",
		}, map[string]string{
			LabelOwner: "dsh-sandbox", LabelInstance: "i1", LabelExecution: "call-1", LabelSession: "s1",
		}},
	}
	for _, tt := range tests {
		extra := maps.Clone(tt.extra)
		got := Labels("i1", "call-1", "s1", tt.extra)
		if !maps.Equal(got, tt.want) {
			t.Errorf("Labels(%s) = %v, want %v", tt.name, got, tt.want)
		}
		if !maps.Equal(extra, tt.extra) {
			t.Errorf("Labels(%s) modified extra", tt.name)
		}
	}
	if got := Labels("i", "c", "", nil); got[LabelSession] != "" || len(got) != 4 {
		t.Errorf("Labels with no session = %v, want an empty session label", got)
	}
}

// TestImports enforces DESIGN §2: this package imports only the standard
// library, the OCI runtime spec, redact and internal/safefile (with its
// golang.org/x/sys/unix), the last two for output redaction (issue 15).
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		switch p {
		case "github.com/dsh-sandbox/dsh-sandbox/sandbox", "github.com/dsh-sandbox/dsh-sandbox/redact",
			"github.com/dsh-sandbox/dsh-sandbox/internal/safefile", "golang.org/x/sys/unix",
			"github.com/dsh-sandbox/dsh-sandbox/sandbox/quota":
			continue
		}
		if !strings.HasPrefix(p, "github.com/opencontainers/runtime-spec/") {
			t.Errorf("sandbox depends on %s; it may import only the standard library, the runtime spec, redact, internal/safefile and sandbox/quota", p)
		}
	}
}
