#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh), builds dsh-sandbox and runs the
# main job: one sandboxed call on the default backend for a demo session.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export PATH="$PATH:/usr/local/go/bin"
mkdir -p bin
go build -o bin/dsh-sandbox ./cmd/dsh-sandbox

demo=$(mktemp -d /tmp/dsh-sandbox-demo.XXXXXX)
trap 'rm -rf "$demo"' EXIT
mkdir -p "$demo/home" "$demo/workspace"
set -x
bin/dsh-sandbox env show --home "$demo/home" --cwd "$demo/workspace" --session-id demo-session
