#!/usr/bin/env bash
# A second real Kubernetes node on the rig's host, for the e2e suite's cross-node scenario: its own
# kubelet and containerd (+ runc, the rig's bridge CNI on another subnet), in a mount namespace of
# their own where /var/lib/kubelet/device-plugins is this node's folder (the path is fixed in
# kubelet 1.32, so two kubelets on one host cannot otherwise have separate device plugins).
#   second-node.sh up DIR NODE_NAME     start; prints the node's device-plugin folder
#   second-node.sh lose DIR NODE_NAME   the node lost at once: its kubelet, containerd and every
#                                       process in its cgroups SIGKILLed; the Node object and the
#                                       folders stay (as a dead machine's would) until `down`
#   second-node.sh down DIR NODE_NAME   stop by PID, kill its containers, remove its cgroups,
#                                       mounts and the Node object; idempotent
# The node authenticates as system:node:NODE_NAME with a client certificate signed by the rig's
# CA (the Node authorizer and NodeRestriction apply as to any node). Its kubelet listens on
# 127.0.0.1 on free ports; the API server cannot reach it (the node's Hostname address does not
# resolve), so `kubectl exec/logs` do not work for its pods; nothing else needs that path.
# Pods get cgroups under /NODE_NAME (cgroupRoot), apart from the first kubelet's /kubepods.
set -euo pipefail
RIG=${RIG:-/opt/k8s-rig}
CMD=${1:?up or down}; DIR=${2:?state folder}; NODE=${3:?node name}
SUBNET=${SECOND_NODE_SUBNET:-10.88.1.0/24}
APISERVER=${APISERVER:-https://127.0.0.1:16443}
KC=$RIG/config/admin.kubeconfig
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
R=$DIR/run
SOCK=$R/containerd.sock

alive() { [ -f "$R/$1.pid" ] && kill -0 "$(cat "$R/$1.pid")" 2>/dev/null; }
stop() { # name seconds
  local pid
  [ -f "$R/$1.pid" ] || return 0
  pid=$(cat "$R/$1.pid")
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 $(($2 * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$R/$1.pid"
}
wait_for() { # what seconds cmd...
  local what=$1 t=$2; shift 2
  for _ in $(seq 1 $((t * 5))); do if "$@" >/dev/null 2>&1; then return 0; fi; sleep 0.2; done
  echo "second-node: timed out waiting for $what" >&2; return 1
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

down() {
  stop plugin 10   # the device plugin e2e.py started for this node (its pidfile)
  stop kubelet 30
  if [ -S "$SOCK" ] && alive containerd; then
    local ctr=(ctr -a "$SOCK" -n k8s.io)
    for id in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    sleep 1
    for id in $("${ctr[@]}" tasks ls -q 2>/dev/null); do "${ctr[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true; done
  fi
  stop containerd 30
  # the pods' network namespaces are mounts in this node's mount namespace, on files of the
  # host's /run/netns: the mounts go with the namespace, the files are removed
  # (not those the namespace copied from the host at its start: node 1's, listed in host-netns)
  local netns=""
  if alive namespace; then
    netns=$(nsenter --mount="/proc/$(cat "$R/namespace.pid")/ns/mnt" -- findmnt -rn -o TARGET |
      grep -E '^(/var)?/run/netns/cni-' | grep -vxF -f "$R/host-netns" || true)
  fi
  # Whatever still runs in the node's cgroups (containers whose containerd died first, their
  # shims) is killed, so that the namespace and the cgroups can go.
  for c in /sys/fs/cgroup/"$NODE" /sys/fs/cgroup/*/"$NODE"; do
    [ -d "$c" ] || continue
    find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u |
      xargs -r kill -KILL 2>/dev/null || true
  done
  sleep 0.5
  stop namespace 5   # the holder of the mount namespace: its mounts go with it
  for f in $netns; do rm -f "$f" 2>/dev/null || true; done
  # the node's cgroups, deepest first
  local left=""
  for c in /sys/fs/cgroup/"$NODE" /sys/fs/cgroup/*/"$NODE"; do
    [ -d "$c" ] || continue
    find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null || true
    if [ -d "$c" ]; then left="$left $c"; fi
  done
  [ -z "$left" ] || echo "second-node: cgroups left behind:$left" >&2
  kubectl --kubeconfig "$KC" delete node "$NODE" --ignore-not-found --wait=false >/dev/null 2>&1 || true
  # The logs stay (beside the folder) for a failed run; the rest goes.
  if [ -d "$DIR/logs" ]; then
    rm -rf "$DIR.logs"
    mv "$DIR/logs" "$DIR.logs"
  fi
  rm -rf "$DIR"
}

lose() {
  local n
  for n in kubelet containerd; do
    if alive "$n"; then kill -KILL "$(cat "$R/$n.pid")" 2>/dev/null || true; fi
  done
  for c in /sys/fs/cgroup/"$NODE" /sys/fs/cgroup/*/"$NODE"; do
    [ -d "$c" ] || continue
    find "$c" -name cgroup.procs -exec cat {} + 2>/dev/null | sort -u |
      xargs -r kill -KILL 2>/dev/null || true
  done
}

if [ "$CMD" = down ]; then down; exit 0; fi
if [ "$CMD" = lose ]; then lose; exit 0; fi
[ "$CMD" = up ] || { echo "usage: second-node.sh up|lose|down DIR NODE_NAME" >&2; exit 2; }
if alive kubelet && alive containerd && alive namespace; then
  echo "second-node: $NODE already up" >&2
  echo "$DIR/device-plugins"
  exit 0
fi
# A half-started node (an earlier up that failed part-way) is stopped first.
if ls "$R"/*.pid >/dev/null 2>&1; then down; mkdir -p "$DIR"; fi
mkdir -p "$R" "$DIR/pki" "$DIR/device-plugins" "$DIR/kubelet" "$DIR/cni" "$DIR/logs"

# --- identity: system:node:NODE in group system:nodes, signed by the rig's CA
if [ ! -f "$DIR/pki/node.crt" ]; then
  (umask 077 && openssl req -newkey rsa:2048 -nodes -keyout "$DIR/pki/node.key" \
    -out "$DIR/pki/node.csr" -subj "/O=system:nodes/CN=system:node:$NODE" 2>/dev/null)
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' \
    > "$DIR/pki/node.ext"
  openssl x509 -req -in "$DIR/pki/node.csr" -CA "$RIG/pki/ca.crt" -CAkey "$RIG/pki/ca.key" \
    -CAcreateserial -CAserial "$DIR/pki/ca.srl" -out "$DIR/pki/node.crt" -days 2 \
    -extfile "$DIR/pki/node.ext" 2>/dev/null
fi
cat > "$DIR/kubelet.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rig
  cluster: {server: "$APISERVER", certificate-authority: "$RIG/pki/ca.crt"}
users:
- name: node
  user: {client-certificate: "$DIR/pki/node.crt", client-key: "$DIR/pki/node.key"}
contexts:
- name: node@rig
  context: {cluster: rig, user: node}
current-context: node@rig
EOF

# --- containerd: its own root, state, socket, runc root and CNI range
cat > "$DIR/containerd.toml" <<EOF
version = 2
root = "$DIR/containerd-root"
state = "$R/containerd-state"
[grpc]
  address = "$SOCK"
[ttrpc]
  address = "$SOCK.ttrpc"
[metrics]
  address = ""
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$R/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$DIR/cni"
EOF
cat > "$DIR/cni/10-rig.conflist" <<EOF
{"cniVersion": "0.4.0", "name": "rig", "plugins": [
  {"type": "bridge", "bridge": "rigbr0", "isGateway": false, "ipMasq": false, "hairpinMode": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$SUBNET"}]], "dataDir": "$R/cni-ipam"}}]}
EOF

PORT=$(free_port); HEALTHZ=$(free_port)
cat > "$DIR/kubelet-config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: 127.0.0.1
port: $PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: $HEALTHZ
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: "$RIG/pki/ca.crt"}
authorization: {mode: AlwaysAllow}
cgroupDriver: cgroupfs
cgroupRoot: /$NODE
failCgroupV1: false
failSwapOn: false
oomScoreAdj: 0
containerRuntimeEndpoint: "unix://$SOCK"
imageServiceEndpoint: "unix://$SOCK"
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
serializeImagePulls: false
registerNode: true
rotateCertificates: false
serverTLSBootstrap: false
EOF

# --- the node's cgroup root in every hierarchy (the kubelet requires that it exists); a new
# cpuset needs its CPUs and memory nodes before anything can join it
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
  mkdir -p "/sys/fs/cgroup/$NODE"          # cgroup v2: one hierarchy
else
  for h in /sys/fs/cgroup/*/; do           # cgroup v1: one per controller (unified is v2's)
    case $h in */unified/) continue;; esac
    mkdir -p "$h$NODE"
  done
fi
if [ -f /sys/fs/cgroup/cpuset/cpuset.cpus ]; then
  cat /sys/fs/cgroup/cpuset/cpuset.cpus > "/sys/fs/cgroup/cpuset/$NODE/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems > "/sys/fs/cgroup/cpuset/$NODE/cpuset.mems"
fi

# --- the mount namespace: a holder process keeps it; containerd and the kubelet join it
mkdir -p /var/lib/kubelet/device-plugins
findmnt -rn -o TARGET | grep -E '^(/var)?/run/netns/cni-' > "$R/host-netns" || true
setsid unshare --mount --propagation private sh -c \
  "mount --bind '$DIR/device-plugins' /var/lib/kubelet/device-plugins && exec sleep infinity" \
  > "$DIR/logs/namespace.log" 2>&1 < /dev/null &
echo $! > "$R/namespace.pid"
NSPID=$(cat "$R/namespace.pid")
in_ns() { nsenter --mount="/proc/$NSPID/ns/mnt" -- "$@"; }
wait_for "its mount namespace" 10 sh -c \
  "nsenter --mount=/proc/$NSPID/ns/mnt -- findmnt -rn /var/lib/kubelet/device-plugins"

setsid nohup nsenter --mount="/proc/$NSPID/ns/mnt" -- /usr/bin/containerd --config "$DIR/containerd.toml" \
  >> "$DIR/logs/containerd.log" 2>&1 < /dev/null &
echo $! > "$R/containerd.pid"
wait_for "containerd" 30 ctr -a "$SOCK" version
for img in "$RIG"/images/*.tar; do
  ctr -a "$SOCK" -n k8s.io images import --no-unpack=false "$img" >/dev/null
done

setsid nohup nsenter --mount="/proc/$NSPID/ns/mnt" -- "$RIG/bin/kubelet" \
  --config "$DIR/kubelet-config.yaml" --kubeconfig "$DIR/kubelet.kubeconfig" \
  --root-dir "$DIR/kubelet" --cert-dir "$DIR/kubelet/pki" --hostname-override "$NODE" --v=2 \
  >> "$DIR/logs/kubelet.log" 2>&1 < /dev/null &
echo $! > "$R/kubelet.pid"
wait_for "node $NODE Ready" 120 sh -c "kubectl --kubeconfig '$KC' get node '$NODE' -o jsonpath='{.status.conditions[?(@.type==\"Ready\")].status}' | grep -qx True"
wait_for "the kubelet's device-plugin socket" 30 test -S "$DIR/device-plugins/kubelet.sock"
in_ns true
echo "$DIR/device-plugins"
