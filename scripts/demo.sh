#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh), builds dsh-sandbox and runs the
# main job: one sandboxed call on the default backend (runc) for a demo
# session. The call prints its DSH_* variables, its user and capabilities,
# and the transcript it can read but not write.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export PATH="$PATH:/usr/local/go/bin"
mkdir -p bin
go build -o bin/dsh-sandbox ./cmd/dsh-sandbox
# pid 1 of every runc and crun container, found next to the binary
CGO_ENABLED=0 go build -o bin/dsh-sandbox-stub ./cmd/dsh-sandbox-stub

demo=$(mktemp -d /tmp/dsh-sandbox-demo.XXXXXX)
trap 'rm -rf "$demo"' EXIT
chmod 0711 "$demo" # the oci backend's mapped container root walks to the state directory
mkdir -p "$demo/home" "$demo/workspace"
# dsh's default is zstd; the demo writes a plain log so that the call can
# print it with head.
flags=(--home "$demo/home" --cwd "$demo/workspace" --session-id demo-session
	--state-dir "$demo/state" --data-dir "$demo/data" --compression none)

# A transcript for the demo session, where dsh would write it.
transcript=$(bin/dsh-sandbox locate "${flags[@]}" | jq -r .path)
mkdir -p "$(dirname "$transcript")"
printf '{"type":"session","version":0,"id":"demo-session","createdAt":%s,"cwd":"%s","delegationDepth":0}\n' \
	"$(date +%s000)" "$demo/workspace" >"$transcript"
chmod 600 "$transcript"

echo "== dsh-sandbox exec (policy workspace-write, backend oci, runtime runc)"
bin/dsh-sandbox exec "${flags[@]}" -- '
echo "-- DSH_* facts of this call:"; env | grep "^DSH_" | sort
echo "-- identity (the workspace is root'"'"'s: root in a user namespace, not host root):"; id
echo "   uid_map (inside, host, count):" $(cat /proc/self/uid_map)
grep -E "^(CapEff|NoNewPrivs|Seccomp):" /proc/self/status
echo "-- transcript (read-only):"; head -c 300 "$DSH_SESSION_JSONL"
{ echo x >> "$DSH_SESSION_JSONL"; } 2>/dev/null || echo "(writing to it fails: read-only file system, as it should)"
echo "-- network:"; cat /proc/net/dev | tail -n +3 | cut -d: -f1'
