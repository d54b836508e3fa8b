#!/usr/bin/env bash
# Builds, starts and stops a real single-node Kubernetes cluster for the
# kubernetes backend's tests (sandbox/kubernetes, docs/kubernetes.md), as
# root:
#
#   scripts/kube.sh build   build kube-apiserver, kube-controller-manager,
#                           kube-scheduler and kubelet at the release
#                           tools/kube/go.mod pins (from the Go module
#                           proxy, through that wrapper module), the
#                           pause program and the CNI plugins at the
#                           release tools/kube/cni/go.mod pins (bridge
#                           with port isolation, host-local, loopback),
#                           into the cache directory; again only when a
#                           pin (go.mod, go.sum, the pause source) or the
#                           Go version changed.
#   scripts/kube.sh start   build (as above), install Debian's etcd if
#                           missing, then start etcd, a
#                           containerd of the cluster's own (own config,
#                           root, state, socket and runc root: never the
#                           one of scripts/daemons.sh or Docker's), the
#                           control plane and the kubelet, with a CA,
#                           serving certificate, admin token and kubeconfig
#                           made for this run; wait until the node is Ready
#                           and schedulable, then print the environment the
#                           tests read, as shell assignments, for eval:
#                             KUBECONFIG, DSH_SANDBOX_TEST_KUBECONFIG,
#                             DSH_SANDBOX_TEST_KUBE_NAMESPACE,
#                             DSH_SANDBOX_TEST_KUBE_CONTAINERD,
#                             DSH_SANDBOX_TEST_KUBE_SECCOMP_DIR,
#                             DSH_SANDBOX_TEST_KUBE_AUDIT_LOG
#   scripts/kube.sh stop    delete every pod, stop what start started (by
#                           the PIDs it recorded), and remove its mounts,
#                           cgroups, bridge, iptables chains, host
#                           directories and state; put back the sysctls
#                           the kubelet changed.
#   scripts/kube.sh env     print the assignments again.
#   scripts/kube.sh status  exit 0 when the cluster of the state directory
#                           runs, 1 when it does not.
#
# Build and start times are printed on stderr. The state directory is
# $DSH_SANDBOX_KUBE_DIR (default /tmp/dsh-sandbox-kube: short, the
# containerd socket path must stay under 108 bytes); the build cache is
# $DSH_SANDBOX_KUBE_CACHE (default ~/.cache/dsh-sandbox/kube, outside the
# repository so that every clone on a machine, CI's included, reuses the
# binaries: the stamp says what they were built from). Logs go to NAME.log in the state directory. The cluster
# listens on 127.0.0.1 only: etcd 23790/23800, kube-apiserver 16443,
# kubelet 10250/10248, kube-controller-manager 10257, kube-scheduler 10259.
set -euo pipefail

top="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir=${DSH_SANDBOX_KUBE_DIR:-/tmp/dsh-sandbox-kube}
dir=${dir%/}
cache=${DSH_SANDBOX_KUBE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/dsh-sandbox/kube}
bin=$cache/bin
sock=$dir/ctrd/containerd.sock
api=https://127.0.0.1:16443
node=127.0.0.1
namespace=dsh-sandbox
cgroot=dsh-sandbox-kube
bridge=dshkube0
subnet=10.88.91.0/24
pause_image=dsh-sandbox.local/kube-pause:1
ready_timeout=120
# The kernel tunables the kubelet sets once at start (P6 of the recipe):
# saved before, restored once the node is Ready and at stop.
sysctls=(vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes)

export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

log() { echo "kube: $*" >&2; }
die() {
	log "$*"
	exit 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f s", b - a }'; }

# started_at PID: the process's start time in clock ticks since boot
# (field 22 of /proc/PID/stat), which tells it from a later process that
# was given the same PID; nothing when PID is gone or a zombie.
started_at() {
	local stat
	stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
	# shellcheck disable=SC2086
	set -- ${stat##*) }
	[ "$1" != Z ] || return 1
	echo "${20}"
}
# pid_of NAME: the PID in NAME's pid file when that process still runs
# and is the one launch started (same start time); nothing otherwise.
pid_of() {
	local pid start
	[ -s "$dir/pids/$1" ] || return 1
	read -r pid start <"$dir/pids/$1" || [ -n "$pid" ] || return 1
	[ -n "$start" ] && [ "$(started_at "$pid")" = "$start" ] && echo "$pid"
}
alive() { pid_of "$1" >/dev/null; }

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
	log "$what did not become ready within ${ready_timeout}s (see the logs in $dir)"
	return 1
}

# kubeapi METHOD PATH [BODY]: one request to the apiserver as admin.
kubeapi() {
	local args=(-sf --cacert "$dir/pki/ca.crt" -H "Authorization: Bearer $(cat "$dir/pki/admin.token")" -X "$1")
	if [ $# -ge 3 ]; then
		args+=(-H 'Content-Type: application/json' --data-binary "$3")
	fi
	curl "${args[@]}" "$api$2"
}

# stamp: what the binaries were built from; a change rebuilds them.
stamp() {
	cat "$top/tools/kube/go.mod" "$top/tools/kube/go.sum" "$top/tools/kube/pause/main.go" \
		"$top/tools/kube/cni/go.mod" "$top/tools/kube/cni/go.sum" | sha256sum | cut -d' ' -f1
	go version
}

build() {
	local want
	want=$(stamp)
	if [ -f "$bin/.stamp" ] && [ "$(cat "$bin/.stamp")" = "$want" ] &&
		[ -x "$bin/kube-apiserver" ] && [ -x "$bin/kubelet" ] && [ -x "$bin/kube-scheduler" ] &&
		[ -x "$bin/kube-controller-manager" ] && [ -x "$bin/pause" ] && [ -x "$bin/cni/bridge" ]; then
		log "binaries up to date in $bin ($(head -1 "$bin/.version"))"
		return 0
	fi
	command -v go >/dev/null || die "Go is required (go not found)"
	local version ldflags p t0
	version=$(awk '$1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' "$top/tools/kube/go.mod")
	[ -n "$version" ] || die "tools/kube/go.mod pins no k8s.io/kubernetes version"
	local minor=${version#v1.}
	minor=${minor%%.*}
	# Without these the binaries report a placeholder gitVersion.
	ldflags="-s -w"
	for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ldflags="$ldflags -X $p.gitVersion=$version -X $p.gitMajor=1 -X $p.gitMinor=$minor"
	done
	mkdir -p "$bin"
	rm -f "$bin/.stamp"
	log "building Kubernetes $version from the Go module proxy into $bin (a first build takes 6-10 minutes on 2 cores)"
	t0=$(now)
	(cd "$top/tools/kube" && nice -n 10 go build -trimpath -ldflags="$ldflags" -o "$bin/" \
		k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubelet \
		k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-controller-manager)
	(cd "$top/tools/kube" && CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$bin/pause" ./pause)
	mkdir -p "$bin/cni"
	(cd "$top/tools/kube/cni" && CGO_ENABLED=0 nice -n 10 go build -trimpath -ldflags="-s -w" -o "$bin/cni/" \
		github.com/containernetworking/plugins/plugins/main/bridge \
		github.com/containernetworking/plugins/plugins/main/loopback \
		github.com/containernetworking/plugins/plugins/ipam/host-local)
	echo "$version" >"$bin/.version"
	echo "$want" >"$bin/.stamp"
	log "build: $(since "$t0")"
}

install_packages() {
	local need=()
	command -v etcd >/dev/null || need+=(etcd-server)
	command -v containerd >/dev/null && command -v ctr >/dev/null || need+=(containerd)
	command -v runc >/dev/null || need+=(runc)
	command -v openssl >/dev/null || need+=(openssl)
	command -v curl >/dev/null || need+=(curl)
	command -v jq >/dev/null || need+=(jq)
	if [ ${#need[@]} -gt 0 ]; then
		log "installing ${need[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2 ||
			{ apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${need[@]}" >&2; }
	fi
}

# launch NAME CMD...: start CMD in the background, logging to NAME.log and
# recording its PID.
launch() {
	local name=$1
	shift
	setsid "$@" >"$dir/$name.log" 2>&1 </dev/null &
	echo "$! $(started_at $!)" >"$dir/pids/$name"
}

pki() {
	local p=$dir/pki
	mkdir -p "$p"
	chmod 0700 "$p"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
		-subj "/CN=dsh-sandbox-kube-ca" -keyout "$p/ca.key" -out "$p/ca.crt" 2>/dev/null
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=kube-apiserver" \
		-keyout "$p/apiserver.key" -out "$p/apiserver.csr" 2>/dev/null
	printf 'subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes.default.svc\nextendedKeyUsage=serverAuth\n' >"$p/apiserver.ext"
	openssl x509 -req -in "$p/apiserver.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 2 \
		-extfile "$p/apiserver.ext" -out "$p/apiserver.crt" 2>/dev/null
	# The API server's client certificate towards the kubelet (attach,
	# logs): the kubelet accepts no anonymous request.
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/O=system:masters/CN=kube-apiserver-kubelet-client" \
		-keyout "$p/kubelet-client.key" -out "$p/kubelet-client.csr" 2>/dev/null
	printf 'extendedKeyUsage=clientAuth\n' >"$p/kubelet-client.ext"
	openssl x509 -req -in "$p/kubelet-client.csr" -CA "$p/ca.crt" -CAkey "$p/ca.key" -CAcreateserial -days 2 \
		-extfile "$p/kubelet-client.ext" -out "$p/kubelet-client.crt" 2>/dev/null
	openssl genrsa -out "$p/sa.key" 2048 2>/dev/null
	openssl rsa -in "$p/sa.key" -pubout -out "$p/sa.pub" 2>/dev/null
	openssl rand -hex 32 >"$p/admin.token"
	echo "$(cat "$p/admin.token"),admin,admin-uid,system:masters" >"$p/tokens.csv"
	umask 077
	cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: dsh-sandbox-kube
  cluster:
    server: $api
    certificate-authority-data: $(base64 -w0 <"$p/ca.crt")
users:
- name: admin
  user:
    token: $(cat "$p/admin.token")
contexts:
- name: dsh-sandbox-kube
  context: {cluster: dsh-sandbox-kube, user: admin, namespace: $namespace}
current-context: dsh-sandbox-kube
EOF
	umask 022
}

# pause_image: the pod sandbox image (the pause program alone), imported
# as a docker archive into the cluster's containerd.
pause_image() {
	local w=$dir/image
	rm -rf "$w"
	mkdir -p "$w/rootfs"
	cp "$bin/pause" "$w/rootfs/pause"
	tar -C "$w/rootfs" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$w/layer.tar" .
	local diff
	diff=$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
	printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["/pause"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
		"$(go env GOARCH)" "$diff" >"$w/config.json"
	printf '[{"Config":"config.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$pause_image" >"$w/manifest.json"
	tar -C "$w" -cf "$w/pause.tar" config.json manifest.json layer.tar
	ctr -a "$sock" -n k8s.io images import "$w/pause.tar" >/dev/null
	rm -rf "$w"
}

cgroups_create() {
	local h
	for h in /sys/fs/cgroup/*/; do
		h=${h%/}
		[ "$h" = /sys/fs/cgroup/unified ] && continue
		[ -d "$h/$cgroot" ] && continue
		mkdir "$h/$cgroot" 2>/dev/null || continue
		if [ -f "$h/cpuset.cpus" ]; then
			cat "$h/cpuset.cpus" >"$h/$cgroot/cpuset.cpus"
			cat "$h/cpuset.mems" >"$h/$cgroot/cpuset.mems"
		fi
	done
	if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
		# cgroup v2 only: the kubelet makes the root itself.
		:
	fi
}

cgroups_remove() {
	local h
	for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
		h=${h%/}
		[ -d "$h/$cgroot" ] || continue
		find "$h/$cgroot" -depth -type d -exec rmdir {} + 2>/dev/null || true
		[ -d "$h/$cgroot" ] && log "cgroup $h/$cgroot is still there"
	done
	return 0
}

configs() {
	mkdir -p "$dir/ctrd" "$dir/cni/net.d" "$dir/kubelet/root" "$dir/kubelet/pki" "$dir/kubelet/pod-logs" "$dir/kubelet/volume-plugins"
	cat >"$dir/ctrd/config.toml" <<EOF
version = 2
root = "$dir/ctrd/root"
state = "$dir/ctrd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$sock"
[ttrpc]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$dir/ctrd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$pause_image"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  netns_mounts_under_state_dir = true
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$bin/cni"
    conf_dir = "$dir/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "$(command -v runc)"
        SystemdCgroup = false
        Root = "$dir/ctrd/runc"
EOF
	# A bridge without an address on the host, no gateway, no masquerade,
	# no iptables rule, and every pod's port isolated: a pod reaches
	# neither the node, the outside nor another pod.
	cat >"$dir/cni/net.d/10-dsh-sandbox.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "dsh-sandbox-kube", "plugins": [{"type": "bridge", "bridge": "$bridge",
 "isGateway": false, "ipMasq": false, "hairpinMode": false, "portIsolation": true,
 "ipam": {"type": "host-local", "ranges": [[{"subnet": "$subnet"}]], "dataDir": "$dir/cni/ipam"}}]}
EOF
	cat >"$dir/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}, x509: {clientCAFile: $dir/pki/ca.crt}}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
cgroupsPerQOS: true
cgroupRoot: /$cgroot
enforceNodeAllocatable: []
containerRuntimeEndpoint: unix://$sock
imageServiceEndpoint: unix://$sock
podLogsDir: $dir/kubelet/pod-logs
volumePluginDir: $dir/kubelet/volume-plugins
nodeStatusUpdateFrequency: 2s
syncFrequency: 5s
podPidsLimit: 1024
maxPods: 110
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
resolvConf: ""
protectKernelDefaults: false
makeIPTablesUtilChains: false
EOF
	cat >"$dir/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: RequestResponse
  resources: [{group: "", resources: [pods, pods/attach, pods/exec, pods/log, events]}]
- level: Metadata
EOF
}

# hostdirs_record: the host directories the kubelet and libcni create
# whatever their configuration says (P12), noted if missing now so that
# stop removes them.
hostdirs_record() {
	: >"$dir/hostdirs"
	local d
	for d in /var/lib/kubelet /var/lib/cni /run/containerd/s /usr/libexec/kubernetes; do
		[ -e "$d" ] || echo "$d" >>"$dir/hostdirs"
	done
}

sysctls_save() {
	local s
	: >"$dir/sysctls"
	for s in "${sysctls[@]}"; do
		echo "$s=$(sysctl -n "$s")" >>"$dir/sysctls"
	done
}

sysctls_restore() {
	[ -f "$dir/sysctls" ] || return 0
	local kv
	while read -r kv; do
		sysctl -q -w "$kv" >/dev/null || log "cannot restore $kv"
	done <"$dir/sysctls"
}

# node_ready: the node is Ready and carries no taint.
node_ready() {
	kubeapi GET "/api/v1/nodes/$node" |
		jq -e '(.status.conditions[] | select(.type == "Ready") | .status == "True") and ((.spec.taints // []) | length == 0)'
}

print_env() {
	echo "export KUBECONFIG=$dir/kubeconfig"
	echo "export DSH_SANDBOX_TEST_KUBECONFIG=$dir/kubeconfig"
	echo "export DSH_SANDBOX_TEST_KUBE_NAMESPACE=$namespace"
	echo "export DSH_SANDBOX_TEST_KUBE_CONTAINERD=$sock"
	echo "export DSH_SANDBOX_TEST_KUBE_SECCOMP_DIR=$dir/kubelet/root/seccomp"
	echo "export DSH_SANDBOX_TEST_KUBE_AUDIT_LOG=$dir/audit.log"
}

start() {
	[ "$(id -u)" -eq 0 ] || die "start needs root"
	if alive kube-apiserver && alive kubelet; then
		log "the cluster of $dir already runs; using it"
		print_env
		return 0
	fi
	if [ -e "$dir" ]; then
		# Left by a run that was killed before its stop (a session or CI
		# job that ended with the cluster up): its processes are gone or
		# half gone, its mounts, cgroups, bridge and rules remain.
		log "$dir is left from a cluster that no longer runs; cleaning it up first"
		stop
		[ -e "$dir" ] && die "cannot clean up $dir (see above); not starting over it"
	fi
	build
	install_packages
	local t0 t1
	t0=$(now)
	mkdir -p "$dir/pids"
	chmod 0711 "$dir"
	hostdirs_record
	sysctls_save
	local fam
	for fam in iptables ip6tables; do
		"$fam-save" 2>/dev/null | grep -o '^:[A-Z0-9-]*' | sort -u >"$dir/$fam-chains" || true
	done
	pki
	configs
	cgroups_create

	launch etcd etcd --name dsh-sandbox --data-dir "$dir/etcd" \
		--listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
		--listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
		--initial-cluster dsh-sandbox=http://127.0.0.1:23800 --listen-metrics-urls ''
	launch containerd containerd --config "$dir/ctrd/config.toml"
	wait_for etcd curl -sf http://127.0.0.1:23790/health
	launch kube-apiserver "$bin/kube-apiserver" --etcd-servers http://127.0.0.1:23790 \
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port 16443 \
		--tls-cert-file "$dir/pki/apiserver.crt" --tls-private-key-file "$dir/pki/apiserver.key" \
		--token-auth-file "$dir/pki/tokens.csv" --authorization-mode Node,RBAC \
		--kubelet-client-certificate "$dir/pki/kubelet-client.crt" --kubelet-client-key "$dir/pki/kubelet-client.key" \
		--service-account-issuer https://kubernetes.default.svc --service-account-key-file "$dir/pki/sa.pub" \
		--service-account-signing-key-file "$dir/pki/sa.key" --service-cluster-ip-range 10.96.0.0/24 \
		--endpoint-reconciler-type none --audit-policy-file "$dir/audit-policy.yaml" \
		--audit-log-path "$dir/audit.log" --audit-log-maxsize 200 --audit-log-maxbackup 1
	wait_for containerd ctr -a "$sock" version
	pause_image
	wait_for kube-apiserver kubeapi GET /readyz
	log "control plane up: $(since "$t0")"
	launch kube-scheduler "$bin/kube-scheduler" --kubeconfig "$dir/kubeconfig" --leader-elect=false \
		--bind-address 127.0.0.1 --secure-port 10259
	launch kube-controller-manager "$bin/kube-controller-manager" --kubeconfig "$dir/kubeconfig" \
		--leader-elect=false --bind-address 127.0.0.1 --secure-port 10257 \
		--controllers serviceaccount-controller,node-lifecycle-controller,pod-garbage-collector-controller,namespace-controller,garbage-collector-controller,root-ca-certificate-publisher-controller,deployment-controller,replicaset-controller \
		--service-account-private-key-file "$dir/pki/sa.key" --root-ca-file "$dir/pki/ca.crt" \
		--use-service-account-credentials=false
	t1=$(now)
	launch kubelet "$bin/kubelet" --config "$dir/kubelet/config.yaml" --kubeconfig "$dir/kubeconfig" \
		--root-dir "$dir/kubelet/root" --cert-dir "$dir/kubelet/pki" --hostname-override "$node"
	wait_for "node $node (Ready, untainted)" node_ready
	log "node Ready: $(since "$t1") after the kubelet started"
	sysctls_restore
	kubeapi POST /api/v1/namespaces "{\"apiVersion\":\"v1\",\"kind\":\"Namespace\",\"metadata\":{\"name\":\"$namespace\"}}" >/dev/null ||
		kubeapi GET "/api/v1/namespaces/$namespace" >/dev/null
	wait_for "service account default in $namespace" kubeapi GET "/api/v1/namespaces/$namespace/serviceaccounts/default"
	mkdir -p "$dir/kubelet/root/seccomp"
	log "cluster up: $(since "$t0") (Kubernetes $(head -1 "$bin/.version"), kubeconfig $dir/kubeconfig)"
	print_env
}

# stop_pid NAME [GRACE]: SIGTERM the process start recorded, SIGKILL after
# GRACE seconds (default 10).
stop_pid() {
	local name=$1 grace=${2:-10} pid i
	# Only the process launch started: a PID file left by a run that was
	# killed may name a PID that is someone else's by now.
	if pid=$(pid_of "$name"); then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < grace * 10; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -KILL "$pid" 2>/dev/null || true
			for ((i = 0; i < 50; i++)); do
				kill -0 "$pid" 2>/dev/null || break
				sleep 0.1
			done
		fi
	fi
	rm -f "$dir/pids/$name"
}

delete_pods() {
	alive kube-apiserver || return 0
	local ns
	for ns in $(kubeapi GET /api/v1/pods | jq -r '[.items[].metadata.namespace] | unique | .[]'); do
		kubeapi DELETE "/api/v1/namespaces/$ns/pods?gracePeriodSeconds=0" >/dev/null || true
	done
	# The kubelet kills the containers of deleted pods; give it a moment,
	# what remains goes below.
	local i
	for ((i = 0; i < 50; i++)); do
		[ "$(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null | wc -l)" -eq 0 ] && break
		sleep 0.2
	done
}

# shims: the PIDs of containerd shims of our containerd.
shims() {
	local p
	for p in /proc/[0-9]*; do
		if tr '\0' ' ' 2>/dev/null <"$p/cmdline" | grep -q -- "containerd-shim.* -address $sock"; then
			echo "${p#/proc/}"
		fi
	done
}

stop_containerd() {
	if alive containerd; then
		local c
		for c in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr -a "$sock" -n k8s.io tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
		done
		sleep 0.2
		for c in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
			ctr -a "$sock" -n k8s.io tasks delete -f "$c" >/dev/null 2>&1 || true
		done
		for c in $(ctr -a "$sock" -n k8s.io containers ls -q 2>/dev/null); do
			ctr -a "$sock" -n k8s.io containers rm "$c" >/dev/null 2>&1 || true
		done
	fi
	stop_pid containerd 10
	local p
	for p in $(shims); do
		kill -KILL "$p" 2>/dev/null || true
	done
}

unmount_all() {
	local m i
	for i in 1 2 3; do
		# Mount points under the state directory, deepest first (mountinfo
		# field 5; \040 and friends are octal escapes).
		local mounts
		mounts=$(awk -v d="$dir/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | awk '{ print length, $0 }' | sort -rn | cut -d' ' -f2-)
		[ -z "$mounts" ] && return 0
		while read -r m; do
			umount -l "$(printf '%b' "$m")" 2>/dev/null || true
		done <<<"$mounts"
	done
	awk -v d="$dir/" 'index($5, d) == 1 { found = 1 } END { exit !found }' /proc/self/mountinfo && return 1
	return 0
}

# iptables_clean FAMILY: the KUBE-* chains of FAMILY (iptables or
# ip6tables) that appeared while the cluster ran (the kubelet's canaries
# and hints, should it make them despite makeIPTablesUtilChains: false):
# the rules jumping to them, then the chains, in every table. Other
# chains are other daemons'.
iptables_clean() {
	local fam=$1 t c rule words new
	[ -f "$dir/$fam-chains" ] && command -v "$fam-save" >/dev/null || return 0
	for t in filter nat mangle; do
		new=$("$fam-save" -t "$t" 2>/dev/null | grep -o '^:KUBE-[A-Z0-9-]*' | sort -u | comm -13 "$dir/$fam-chains" -) || true
		for c in $new; do
			c=${c#:}
			"$fam-save" -t "$t" 2>/dev/null | grep -E -- "^-A [A-Za-z0-9_-]+ (.* )?-j $c( |\$)" | while read -r rule; do
				read -ra words <<<"-D${rule#-A}"
				"$fam" -t "$t" "${words[@]}" 2>/dev/null || log "cannot delete the $fam rule $rule"
			done
		done
		for c in $new; do
			"$fam" -t "$t" -F "${c#:}" 2>/dev/null || true
		done
		for c in $new; do
			"$fam" -t "$t" -X "${c#:}" 2>/dev/null || log "cannot delete the $fam chain ${c#:} in table $t"
		done
	done
	return 0
}

stop() {
	[ "$(id -u)" -eq 0 ] || die "stop needs root"
	[ -d "$dir" ] || {
		log "nothing to stop ($dir does not exist)"
		return 0
	}
	local t0
	t0=$(now)
	delete_pods
	stop_pid kube-controller-manager 5
	stop_pid kube-scheduler 5
	stop_pid kubelet 10
	stop_containerd
	stop_pid kube-apiserver 10
	stop_pid etcd 10
	if ! unmount_all; then
		die "mounts under $dir remain; not removing it (see /proc/self/mountinfo)"
	fi
	cgroups_remove
	if ip link show "$bridge" >/dev/null 2>&1; then
		ip link del "$bridge" || log "cannot delete the bridge $bridge"
	fi
	iptables_clean iptables
	iptables_clean ip6tables
	if [ -f "$dir/hostdirs" ]; then
		local d
		while read -r d; do
			case $d in
			# Shim sockets of other containerds may live there by now.
			/run/containerd/s) rmdir "$d" 2>/dev/null || true ;;
			*) [ -n "$d" ] && [ -e "$d" ] && rm -rf --one-file-system "$d" ;;
			esac
		done <"$dir/hostdirs"
	fi
	sysctls_restore
	rm -rf --one-file-system "$dir"
	log "stopped: $(since "$t0")"
}

case "${1:-}" in
build) build ;;
start) start ;;
stop) stop ;;
env) print_env ;;
status) alive kube-apiserver && alive kubelet ;;
*)
	echo "usage: scripts/kube.sh build|start|stop|env|status" >&2
	exit 2
	;;
esac
