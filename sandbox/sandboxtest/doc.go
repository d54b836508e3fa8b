// Package sandboxtest is the conformance suite that every sandbox backend
// passes unchanged, the way containerd runs one suite over every
// snapshotter. A backend's test calls
//
//	sandboxtest.Run(t, sandboxtest.Subject{New: …, Policy: …, ImageEnv: …, Leftovers: …, Isolated: true})
//
// and the suite runs each case of Cases as a subtest with a stable name:
// the child's exact environment (DESIGN §3.6), exit codes and signals,
// timeouts and cancellation of the whole container, output capture with
// tail and spill file, the read-only transcript mount and its live
// appends, the workspace modes, the isolation facts of DESIGN §3.8
// (namespaces, capabilities, no-new-privileges, seccomp, read-only root,
// masked /proc, limits), concurrent calls of different sessions,
// background jobs, invalid requests and that nothing is left behind.
//
// Every case builds its own workspace and a fake dsh sessions root
// (<root>/--<project>--/<session-id>/session.jsonl) with plain file
// writes. The suite changes the process environment with t.Setenv and
// therefore runs its cases one after another; concurrency is exercised
// inside the cases that need it.
//
// Only tests import this package. It imports sandbox, testing and the
// standard library, nothing else; it runs on Linux only (it reads /proc).
package sandboxtest
