// Package render writes a call's result for the model, in the format of
// dsh's bash tool (DESIGN §3.7), so that prompts and parsers written for
// dsh read it unchanged: Result renders a sandbox.Result, and DenialNote
// (from Denials) closes it with the hosts the egress policy refused.
// Everything here is pure.
//
// It imports only the standard library and sandbox; the service, the CLI
// and the MCP server import it.
package render
