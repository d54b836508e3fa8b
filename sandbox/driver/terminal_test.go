package driver

import (
	"errors"
	"strings"
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

func TestNoTerminal(t *testing.T) {
	err := NoTerminal("oci (runsc)")
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "oci (runsc)") || sandbox.ExitCode(nil, err) != sandbox.ExitUsage {
		t.Errorf("NoTerminal = %v (exit %d), want an invalid-argument error naming the backend", err, sandbox.ExitCode(nil, err))
	}
}
