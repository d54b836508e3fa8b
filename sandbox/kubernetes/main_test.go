package kubernetes

import (
	"os"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
)

// The tests that need a cluster need root and the environment
// scripts/kube.sh start prints (eval "$(scripts/kube.sh start)"); without
// them they skip, saying what is missing, and under CI=true they fail.

// stubPath is the stub TestMain builds; "" when it could not.
var (
	stubPath string
	stubErr  error
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dsh-sandbox-kube-stub-")
	if err == nil {
		// The pods' users must reach the stub through its directory.
		_ = os.Chmod(dir, 0o755)
		stubPath, stubErr = fixtures.BuildStub(dir)
	} else {
		stubErr = err
	}
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	os.Exit(code)
}
