// Package overlay is the registry of DSH_* environment facts: contributors
// declare the keys they may set, the registry validates those declarations
// at registration, and Collect runs every contributor for one execution and
// returns an immutable, sorted Snapshot that becomes the last layer of a
// child's environment (DESIGN §3.5, §3.6).
//
// The four built-in keys (DSH_HOME, DSH_SHELL, DSH_SESSION_ID,
// DSH_SESSION_JSONL) are always reserved. Ordinary contributors register
// with Registry.Register (or through the narrower Registrar handle that a
// registry's owner gives to plugins) and can never claim them; only the
// built-in path, Registry.RegisterBuiltIn, may own a reserved key. The
// built-in contributors themselves live in package contributors.
//
// This package imports only session and the standard library. Packages
// above it (contributors, sandbox wiring, api, cmd) may import it.
package overlay
