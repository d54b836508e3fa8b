package containerd

import (
	"os"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/internal/fixtures"
)

// TestMain builds the stub, pid 1 of the calls' containers (stub.go),
// and puts it on PATH for the tests.
func TestMain(m *testing.M) {
	if s, ok := fixtures.SupervisorFromEnv(); ok {
		os.Exit(runLifelineHelper(s))
	}
	os.Exit(fixtures.RunWithStub(m))
}
