// Package hooks runs users' existing Claude Code and Codex hook scripts
// around dsh-sandbox's own events (DESIGN §3.10): it loads a hook
// configuration in either dialect, matches hooks to an event, builds the
// exact stdin bytes a dialect promises, runs every matching hook
// concurrently through a sandbox executor, decodes each hook's exit code and
// output, and merges them into one outcome.
//
// The payloads themselves are built by the dialect subpackages claudecode
// and codex, which implement Dialect. Both take the transcript location
// from a persistence.Locator, which reads, creates and flushes nothing,
// so computing a payload never materializes a session.
//
// A hook configuration usually lies in a workspace the agent can write, so
// it is data (DESIGN §3.10): Load opens it without following links, as a
// regular file of bounded size; it never names the policy its hooks run
// under (the caller passes the operator's); and its commands run as
// written, placeholders such as ${CLAUDE_PROJECT_DIR} reaching them as
// environment variables, never pasted into the command string.
//
// This package imports only session, persistence, sandbox and
// internal/safefile. It never
// picks a backend: callers pass a Runner (any sandbox.Executor) and a
// resolved sandbox.Policy; cmd/dsh-sandbox wires the real ones. The agent
// loop, the service and cmd/dsh-sandbox may import it.
package hooks
