package sandbox

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImports enforces DESIGN §2: this package, the seam, imports only the
// standard library, redact (the secrets a Call carries) and signals (for
// ExitCode); the mechanisms, and the OCI runtime spec's options, live in
// packages of their own (issue 24).
func TestImports(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Skipf("go list unavailable: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		switch p {
		case "github.com/dsh-sandbox/dsh-sandbox/sandbox", "github.com/dsh-sandbox/dsh-sandbox/redact",
			"github.com/dsh-sandbox/dsh-sandbox/sandbox/signals":
			continue
		}
		t.Errorf("sandbox depends on %s; it may import only the standard library, redact and sandbox/signals", p)
	}
}
