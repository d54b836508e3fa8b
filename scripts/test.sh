#!/usr/bin/env bash
# Sets up the machine (scripts/setup.sh) and runs every check and test:
# gofmt, go vet, the unit and backend tests (real runtimes), the race
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

echo "== go test"
go test -count=1 -timeout 20m ./...
echo "== go test -race (concurrent packages)"
go test -count=1 -race -timeout 10m ./persistence/... ./overlay/... ./contributors/...
if [ -d integration ]; then
	echo "== integration"
	go test -count=1 -tags integration -timeout 15m ./integration/...
fi
echo "== all tests passed"
