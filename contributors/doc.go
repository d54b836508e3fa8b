// Package contributors holds the built-in DSH_* contributors and the dsh
// home resolution they rely on (DESIGN §3.4, §3.5):
//
//   - home/shell: DSH_HOME (the execution's absolute home) and DSH_SHELL=1;
//   - session: DSH_SESSION_ID, only for a call made by an agent;
//   - transcript: DSH_SESSION_JSONL, only when the persistence that is
//     current at execution time Locates a "jsonl" transcript.
//
// Install puts all three into an overlay.Registry through its built-in
// path. ResolveHome and CheckHomes turn configured homes into one
// absolute dsh home.
//
// It imports overlay, persistence and session. The service and CLI wiring
// (cmd/dsh-sandbox, api) may import it; the lower layers must not.
package contributors
