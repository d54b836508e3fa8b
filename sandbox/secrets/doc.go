// Package secrets knows a call's secrets (issue 15): Of lists what a
// call's output must not show (secret-looking variables of the service,
// the policy's redact.env and redact.files), Redactor turns them into a
// redact.Set, RedactOutcome removes them from a finished call's result
// and error, and CredentialValue reads the value of an egress credential
// at call time.
//
// It imports the standard library, redact, internal/safefile, sandbox and
// childenv; prepare, egress, hooks, the service and the CLI import it.
package secrets
