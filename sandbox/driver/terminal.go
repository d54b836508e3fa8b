package driver

import "github.com/dsh-sandbox/dsh-sandbox/sandbox"

// NoTerminal is the refusal, an ErrInvalid naming the backend (and
// runtime), of a call with a Terminal on a backend that cannot give it
// one: a call asked to run on a terminal never runs without one.
func NoTerminal(backend string) error {
	return sandbox.Errorf(sandbox.ErrInvalid, "%s: cannot run a call on a terminal (exec -t); use the oci (runc, crun), docker or containerd backend", backend)
}
