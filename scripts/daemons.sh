#!/usr/bin/env bash
# Starts and stops the container daemons the docker and containerd
# backend tests need (DESIGN §3.11), as root:
#
#   scripts/daemons.sh start [docker|containerd]...
#                              start dockerd unless one answers already,
#                              and a PRIVATE containerd (own config, root,
#                              state and socket in the state directory,
#                              never the one Docker uses); wait until both
#                              answer; print the environment the tests read
#                              as shell assignments, for eval:
#                                DOCKER_HOST, DSH_SANDBOX_TEST_CONTAINERD
#   scripts/daemons.sh stop [docker|containerd]...
#                              stop only the daemons this script started
#                              (their PIDs are recorded in the state
#                              directory) and remove the private
#                              containerd's files.
#   scripts/daemons.sh env     print the assignments again.
#   scripts/daemons.sh start-private
#                              for tests that stop or kill an engine: start
#                              a containerd and a dockerd that are both
#                              the test's own (the dockerd uses that
#                              containerd through --containerd, its own
#                              socket, data-root, exec-root and pidfile),
#                              never touching a daemon that already runs;
#                              print DOCKER_HOST for them. Needs
#                              DSH_SANDBOX_DAEMONS_DIR set to a directory
#                              of the caller's own. Run again after the
#                              dockerd was stopped, it starts it again.
#   scripts/daemons.sh stop-private
#                              stop what start-private started (dockerd
#                              first, then its containerd, their shims
#                              and mounts) and remove their files.
#
# Naming daemons limits start and stop to them (default: both). A dockerd
# this script starts has gVisor's runsc registered as runtime "runsc" when runsc is installed,
# with --oci-seccomp (the policy's seccomp filter applies inside the
# sandbox too) and --network=none (every call runs without a network; gVisor
# refuses to set up one from the engine's empty namespace).
#
# A dockerd this script starts remaps user namespaces
# (--userns-remap=default: the engine makes the user dockremap and its
# /etc/subuid and /etc/subgid ranges on first start, with useradd and
# usermod), so that container root is an unprivileged host uid
# (docs/identity.md). DSH_SANDBOX_DOCKER_USERNS_REMAP=none starts it
# without (the tests of the refusal of uid-0 calls use that); another
# value is passed as --userns-remap. A dockerd this script did not start
# is used as it is.
#
# The state directory is $DSH_SANDBOX_DAEMONS_DIR, default
# /tmp/dsh-sandbox-daemons. Logs go to daemon-name.log in it. Safe to run
# start twice: a daemon this script started and that still runs is reused.
set -euo pipefail

dir=${DSH_SANDBOX_DAEMONS_DIR:-/tmp/dsh-sandbox-daemons}
dir=${dir%/}
docker_sock=/var/run/docker.sock
private_docker_sock=$dir/docker/docker.sock
ctrd_sock=$dir/containerd/containerd.sock
ready_timeout=60
userns_remap=${DSH_SANDBOX_DOCKER_USERNS_REMAP:-default}

log() { echo "daemons: $*" >&2; }

# dir_mode: the mode of the state directory and of the private dockerd's
# directory, ancestors of its data-root: with userns-remap the remapped
# root must search them (the engine refuses to start, and containers to
# mount their rootfs, otherwise); 0711 lists nothing.
dir_mode() { if [ "$userns_remap" != none ]; then echo 0711; else echo 0700; fi; }

# alive PIDFILE: true when the recorded process still runs.
alive() {
	[ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null
}

# wait_for what cmd...: polls cmd until it succeeds or ready_timeout passes.
wait_for() {
	local what=$1
	shift
	local i
	for ((i = 0; i < ready_timeout * 10; i++)); do
		if "$@" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.1
	done
	log "$what did not become ready within ${ready_timeout}s"
	return 1
}

# docker_ready [SOCKET]: the engine on SOCKET (default: the one in use) answers.
docker_ready() { docker -H "unix://${1:-$(docker_sock_in_use)}" version --format '{{.Server.APIVersion}}'; }
# has_runsc SOCKET: the engine on SOCKET has a runtime named runsc.
has_runsc() { docker -H "unix://$1" info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"'; }
# remaps SOCKET: the engine on SOCKET remaps user namespaces.
remaps() { docker -H "unix://$1" info --format '{{json .SecurityOptions}}' 2>/dev/null | grep -q 'name=userns'; }
# docker_sock_in_use: the engine socket start chose (the default one, or
# the private one when the default engine lacks runsc).
docker_sock_in_use() { cat "$dir/docker.host" 2>/dev/null || echo "$docker_sock"; }
ctrd_ready() { ctr --address "$ctrd_sock" version; }

print_env() {
	echo "export DOCKER_HOST=unix://$(docker_sock_in_use)"
	echo "export DSH_SANDBOX_TEST_CONTAINERD=$ctrd_sock"
}

start_docker() {
	local sock=$docker_sock private=
	if [ -n "${private_only:-}" ]; then
		# start-private: never the engine on the default socket.
		sock=$private_docker_sock private=1
		if alive "$dir/dockerd.started" && docker_ready "$sock" >/dev/null 2>&1; then
			log "private dockerd already runs on $sock; using it"
			echo "$sock" >"$dir/docker.host"
			return 0
		fi
	elif docker_ready "$docker_sock" >/dev/null 2>&1; then
		if ! command -v runsc >/dev/null 2>&1 || has_runsc "$docker_sock"; then
			log "dockerd already answers on $docker_sock; using it"
			if [ "$userns_remap" != none ] && ! remaps "$docker_sock"; then
				log "warning: it does not remap user namespaces, so the docker backend refuses calls as uid 0 on it; restart it with --userns-remap (if this script started it: stop docker, then start docker)"
			fi
			echo "$docker_sock" >"$dir/docker.host"
			return 0
		fi
		# The tests need runsc registered; that engine is not ours to
		# reconfigure, so a private one (own data, state and socket) runs
		# beside it.
		log "the dockerd on $docker_sock has no runsc runtime; starting a private one on $private_docker_sock"
		sock=$private_docker_sock private=1
		if alive "$dir/dockerd.started" && docker_ready "$sock" >/dev/null 2>&1; then
			log "private dockerd already runs on $sock; using it"
			echo "$sock" >"$dir/docker.host"
			return 0
		fi
	fi
	if ! command -v dockerd >/dev/null 2>&1; then
		log "dockerd is not installed (apt-get install docker.io)"
		return 1
	fi
	if alive "$dir/dockerd.started"; then
		# A dockerd this script started is still shutting down.
		log "waiting for the previous dockerd (pid $(cat "$dir/dockerd.started")) to exit"
		wait_for "previous dockerd exit" bash -c "! kill -0 $(cat "$dir/dockerd.started")" || return 1
	fi
	rm -f "$dir/dockerd.pid"
	local runsc
	if runsc=$(command -v runsc); then
		printf '{"runtimes": {"runsc": {"path": "%s", "runtimeArgs": ["--oci-seccomp", "--network=none"]}}}\n' "$runsc" >"$dir/dockerd.json"
	else
		echo '{}' >"$dir/dockerd.json"
	fi
	local extra=()
	if [ "$userns_remap" != none ]; then
		extra+=(--userns-remap "$userns_remap")
	fi
	if [ -n "$private" ]; then
		mkdir -p "$dir/docker/root" "$dir/docker/exec"
		chmod "$(dir_mode)" "$dir/docker"
		extra+=(--data-root "$dir/docker/root" --exec-root "$dir/docker/exec"
			--containerd-namespace dsh-sandbox-moby --containerd-plugins-namespace dsh-sandbox-moby-plugins)
	fi
	if [ -n "${private_only:-}" ]; then
		# Without --containerd, dockerd would use a system containerd
		# on /run/containerd/containerd.sock when one runs.
		extra+=(--containerd "$ctrd_sock")
	fi
	log "starting dockerd on $sock (userns-remap: $userns_remap)"
	# The backends need no bridge: every call runs with network none.
	setsid dockerd --host "unix://$sock" --bridge=none --iptables=false --ip-masq=false \
		--config-file "$dir/dockerd.json" --pidfile "$dir/dockerd.pid" "${extra[@]}" >"$dir/dockerd.log" 2>&1 </dev/null &
	echo $! >"$dir/dockerd.started"
	echo "$sock" >"$dir/docker.host"
	wait_for dockerd docker_ready "$sock" || {
		tail -20 "$dir/dockerd.log" >&2
		return 1
	}
}

start_containerd() {
	if alive "$dir/containerd.started" && ctrd_ready >/dev/null 2>&1; then
		log "private containerd already runs on $ctrd_sock; using it"
		return 0
	fi
	if ! command -v containerd >/dev/null 2>&1; then
		log "containerd is not installed (apt-get install containerd)"
		return 1
	fi
	mkdir -p "$dir/containerd/root" "$dir/containerd/state"
	chmod 0700 "$dir/containerd"
	cat >"$dir/containerd/config.toml" <<EOF
version = 2
root = "$dir/containerd/root"
state = "$dir/containerd/state"
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = "$ctrd_sock"

[ttrpc]
  address = "$ctrd_sock.ttrpc"

[debug]
  address = ""

[metrics]
  address = ""
EOF
	log "starting a private containerd on $ctrd_sock"
	setsid containerd --config "$dir/containerd/config.toml" >"$dir/containerd.log" 2>&1 </dev/null &
	echo $! >"$dir/containerd.started"
	wait_for containerd ctrd_ready || {
		tail -20 "$dir/containerd.log" >&2
		return 1
	}
}

# unmount_below DIR: lazily unmounts everything mounted below DIR,
# deepest first (snapshots stay mounted when a daemon died hard).
unmount_below() {
	local m
	{ grep -F " $1/" /proc/self/mountinfo || true; } | awk '{print $5}' | sort -r |
		while read -r m; do umount -l "$m" 2>/dev/null || true; done
}

# stop_shims SOCKET: kills the runc shims a containerd on SOCKET started
# (they outlive their daemon), by PID.
stop_shims() {
	local pid
	for pid in $(pgrep -f -- "containerd-shim-runc-v2 .*-address $1( |\$)" || true); do
		log "stopping shim $pid of the containerd on $1"
		kill -KILL "$pid" 2>/dev/null || true
	done
}

# stop_pid NAME: stops the daemon whose PID NAME.started records, TERM
# then KILL, and forgets it.
stop_pid() {
	local f=$dir/$1.started pid i
	[ -s "$f" ] || return 0
	pid=$(cat "$f")
	# Every daemon this script starts names a file of $dir on its command
	# line; a recorded PID whose process does not is no longer ours (the
	# daemon died and the PID was reused): never signal it.
	if kill -0 "$pid" 2>/dev/null && ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- " $dir/"; then
		log "pid $pid recorded for $1 is not a daemon this script started (its command line names nothing in $dir); leaving it alone"
		rm -f "$f"
		return 0
	fi
	if kill -0 "$pid" 2>/dev/null; then
		log "stopping $1 (pid $pid)"
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 200; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			log "$1 (pid $pid) ignored SIGTERM for 20s; killing it"
			kill -KILL "$pid" 2>/dev/null || true
		fi
	fi
	rm -f "$f"
}

# wanted NAME: true when the command line names NAME or names none.
wanted() {
	[ ${#daemons[@]} -eq 0 ] && return 0
	local d
	for d in "${daemons[@]}"; do
		[ "$d" = "$1" ] && return 0
	done
	return 1
}

cmd=${1:-}
shift || true
daemons=("$@")
for d in "${daemons[@]}"; do
	case $d in
	docker | containerd) ;;
	*)
		echo "usage: $0 start|stop|env [docker|containerd]...: unknown daemon $d" >&2
		exit 2
		;;
	esac
done

case "$cmd" in
start)
	if [ "$(id -u)" -ne 0 ]; then
		log "must run as root"
		exit 1
	fi
	mkdir -p "$dir"
	chmod "$(dir_mode)" "$dir"
	if wanted docker; then start_docker; fi
	if wanted containerd; then start_containerd; fi
	print_env
	;;
stop)
	if wanted containerd; then
		stop_pid containerd
		stop_shims "$ctrd_sock"
	fi
	if wanted docker; then
		if [ -s "$dir/dockerd.started" ]; then
			# The shims of the engine's own containerd outlive it; a
			# container whose engine was killed mid-call can leave one.
			ours=$(docker_sock_in_use)
			stop_pid dockerd
			if [ "$ours" = "$docker_sock" ]; then
				stop_shims /var/run/docker/containerd/containerd.sock
			else
				stop_shims "$dir/docker/exec/containerd/containerd.sock"
			fi
		fi
		rm -f "$dir/docker.host"
		if [ -d "$dir/docker" ]; then
			unmount_below "$dir/docker"
			rm -rf "$dir/docker"
		fi
	fi
	if wanted containerd && [ -d "$dir/containerd" ]; then
		# Snapshots may still be mounted when containerd died hard.
		unmount_below "$dir/containerd"
		rm -rf "$dir/containerd"
	fi
	;;
env)
	print_env
	;;
start-private | stop-private)
	if [ -z "${DSH_SANDBOX_DAEMONS_DIR:-}" ] || [ "$dir" = /tmp/dsh-sandbox-daemons ] || [ ${#daemons[@]} -ne 0 ]; then
		echo "usage: DSH_SANDBOX_DAEMONS_DIR=DIR $0 $cmd: DIR must be the caller's own directory" >&2
		exit 2
	fi
	if [ "$cmd" = stop-private ]; then
		# dockerd first: it stops its containers through its containerd.
		status=0
		bash "${BASH_SOURCE[0]}" stop docker || status=1
		bash "${BASH_SOURCE[0]}" stop containerd || status=1
		rm -f "$dir/dockerd.json" "$dir/dockerd.pid"
		exit $status
	fi
	if [ "$(id -u)" -ne 0 ]; then
		log "must run as root"
		exit 1
	fi
	mkdir -p "$dir"
	chmod "$(dir_mode)" "$dir"
	private_only=1
	start_containerd
	start_docker
	echo "export DOCKER_HOST=unix://$(docker_sock_in_use)"
	;;
*)
	echo "usage: $0 start|stop|env|start-private|stop-private" >&2
	exit 2
	;;
esac
