// Package api is the HTTP/JSON service of dsh-sandbox (DESIGN §1, issue 5):
// the versioned /v1 handlers (foreground runs as one JSON result or an NDJSON
// stream, streamed stdin, background jobs, DSH_* declarations, snapshot
// preview, transcript location, health), the trust boundary that builds every DSH_* snapshot
// itself, strict request decoding with size limits, client identity
// (SO_PEERCRED on the socket, named tokens on TCP) and scope (workspace
// checks, session and job ownership, refusal of sandboxed peers), a
// concurrency limit with a bounded queue shared by calls and jobs, the
// Unix-socket and bearer-token TCP listeners, the hash-chained JSONL audit
// log, Prometheus metrics and graceful shutdown.
// The wire types live in api/types; the Go client in api/client, which
// imports them and never this package.
//
// The server never picks a backend: cmd/dsh-sandbox injects a
// sandbox.Executor. It imports session, persistence, overlay, contributors,
// sandbox and policy; only cmd/dsh-sandbox and tests import it.
package api
