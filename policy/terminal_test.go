package policy

import (
	"testing"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestWithTerminal(t *testing.T) {
	s := &specs.Spec{Process: &specs.Process{}}
	if err := WithTerminal(sandbox.WindowSize{Rows: 33, Cols: 101})(s); err != nil {
		t.Fatal(err)
	}
	if !s.Process.Terminal || s.Process.ConsoleSize == nil || *s.Process.ConsoleSize != (specs.Box{Height: 33, Width: 101}) {
		t.Errorf("WithTerminal(33×101) = terminal %v, console %+v; want true, 33×101", s.Process.Terminal, s.Process.ConsoleSize)
	}
	if err := WithTerminal(sandbox.WindowSize{})(s); err != nil || *s.Process.ConsoleSize != (specs.Box{Height: 24, Width: 80}) {
		t.Errorf("WithTerminal(zero) = %+v, %v; want 24×80", s.Process.ConsoleSize, err)
	}
	if err := WithTerminal(sandbox.WindowSize{})(&specs.Spec{}); err == nil {
		t.Errorf("WithTerminal on a spec without a process = nil error")
	}
}
