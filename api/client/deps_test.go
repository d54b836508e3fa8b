package client

import (
	"os/exec"
	"strings"
	"testing"
)

// TestClientLinksOnlyTheWire: the client's import graph holds no server
// package and no server-only module (STYLE 17), so a harness that embeds
// it links neither metrics, logging, container daemons nor SQLite.
func TestClientLinksOnlyTheWire(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{with .Module}}{{.Path}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	banned := []string{"prometheus", "zerolog", "docker", "containerd", "sqlite"}
	serverPkgs := map[string]bool{
		"github.com/dsh-sandbox/dsh-sandbox/api":          true,
		"github.com/dsh-sandbox/dsh-sandbox/overlay":      true,
		"github.com/dsh-sandbox/dsh-sandbox/policy":       true,
		"github.com/dsh-sandbox/dsh-sandbox/contributors": true,
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	sawTypes := false
	for _, line := range lines {
		pkg, module, _ := strings.Cut(line, " ")
		sawTypes = sawTypes || pkg == "github.com/dsh-sandbox/dsh-sandbox/api/types"
		if serverPkgs[pkg] {
			t.Errorf("api/client depends on %s, a server-side package", pkg)
		}
		for _, b := range banned {
			if strings.Contains(module, b) {
				t.Errorf("api/client depends on %s (module %s), banned: %s", pkg, module, b)
			}
		}
	}
	if !sawTypes || len(lines) < 10 {
		t.Errorf("go list -deps listed %d packages without api/types: the check saw nothing", len(lines))
	}
}
