package policy

import (
	"errors"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/dsh-sandbox/dsh-sandbox/sandbox"
)

// WithTerminal makes the spec's process run on a pseudo-terminal of the
// runtime, size (size.OrDefault()) at start. Apply it after
// WithProcess, which resets Terminal.
func WithTerminal(size sandbox.WindowSize) SpecOpt {
	return func(s *specs.Spec) error {
		if s.Process == nil {
			return errors.New("terminal: the spec has no process")
		}
		size = size.OrDefault()
		s.Process.Terminal = true
		s.Process.ConsoleSize = &specs.Box{Height: uint(size.Rows), Width: uint(size.Cols)}
		return nil
	}
}
