// Package jobs runs calls in the background on any sandbox.Executor
// (DESIGN §3.7): a Runner starts a job and returns its id at once, reads
// its new output, waits for it, kills it and forgets it, per owner. The
// results it hands out, sandbox.JobOutput and sandbox.JobInfo, are part
// of the seam, so that API clients need not link this package.
//
// It imports the standard library, sandbox, prepare (to validate a
// request before it becomes a job) and capture (for the tail of each
// stream); the service and the MCP server import it.
package jobs
