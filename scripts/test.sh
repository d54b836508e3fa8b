#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh), starts the daemons the backend
# tests need (scripts/daemons.sh) and runs every check and test: gofmt,
# go vet, the unit and backend tests (real runtimes and daemons), the race
# detector on the concurrent packages, and the end-to-end tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
export PATH="$PATH:/usr/local/go/bin"

echo "== gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change: $unformatted" >&2
	exit 1
fi
echo "== go vet"
go vet ./...
go vet -tags integration ./...
echo "== openapi lint (redocly with tools/redocly/redocly.yaml: 0 errors, 0 warnings)"
(cd tools/redocly && npm run --silent lint)

echo "== daemons"
# A Docker engine (started only when none answers) and a private
# containerd for the docker and containerd backend tests; stopped again at
# the end, whatever happens (only what daemons.sh started).
trap 'scripts/daemons.sh stop' EXIT
# Assigned first: `eval "$(cmd)"` would go on after a failed start.
daemons_env=$(scripts/daemons.sh start)
eval "$daemons_env"

echo "== kubernetes test cluster"
# A real single-node cluster (scripts/kube.sh: Kubernetes built from the
# Go module proxy, the binaries cached in ~/.cache/dsh-sandbox/kube and
# their build in GOCACHE; its own etcd and containerd) for the
# kubernetes backend's tests; stopped at the end only when this run
# started it.
kube_started=0
if ! scripts/kube.sh status; then
	kube_started=1
fi
trap '[ "$kube_started" = 1 ] && scripts/kube.sh stop; scripts/daemons.sh stop' EXIT
kube_env=$(scripts/kube.sh start)
eval "$kube_env"

echo "== go test -race (every package, the backends against real runtimes and daemons)"
# TestHostMemoryBounded measures the host process's resident set, which
# the race detector's shadow memory inflates several times: it runs in
# the next step, without the detector.
go test -count=1 -race -timeout 30m -skip '^TestHostMemoryBounded$' ./...
echo "== egress memory bounds (without the race detector)"
go test -count=1 -run '^TestHostMemoryBounded$' ./egress/
if [ -d integration ]; then
	echo "== integration"
	go test -count=1 -tags integration -timeout 45m ./integration/...
fi
echo "== dsh interop (dsh-sandbox against dsh's own code, interop/dsh)"
go vet -tags dshinterop ./interop/...
go test -count=1 -tags dshinterop -timeout 15m ./interop/...
echo "== dsh shell provider (integrations/dsh: type check and node tests against a real serve)"
(cd integrations/dsh && npm test)
echo "== all tests passed"
